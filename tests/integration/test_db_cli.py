"""`idcache db`: the command-line front end of the store, run as a user would.

Every failure case checks three things: exit status 1 (2 for a wrong command
line), a one-line message that names the file:line, DN or filter position,
and for writes that the store is exactly as it was (export before == after).
"""
import os
import shutil
import subprocess
import time

import pytest

BASE = "dc=example,dc=org"

SAMPLE = f"""\
dn: {BASE}
objectClass: top
objectClass: domain
dc: example

dn: ou=people,{BASE}
objectClass: organizationalUnit
ou: people

dn: ou=groups,{BASE}
objectClass: organizationalUnit
ou: groups

dn: uid=alice,ou=people,{BASE}
objectClass: posixAccount
objectClass: inetOrgPerson
uid: alice
cn: Alice Liddell
sn: Liddell
uidNumber: 1000
gidNumber: 1000
homeDirectory: /home/alice
loginShell: /bin/bash
description:: w6lsw6hyZSDDoCBsJ8OpY29sZQ==

dn: uid=bob,ou=people,{BASE}
objectClass: posixAccount
objectClass: inetOrgPerson
uid: bob
cn: Bob Builder
sn: Builder
uidNumber: 1001
gidNumber: 1000
homeDirectory: /home/bob
loginShell: /bin/sh

dn: uid=carol,ou=people,{BASE}
objectClass: posixAccount
objectClass: inetOrgPerson
uid: carol
cn: Carol Danvers
sn: Danvers
uidNumber: 2000
gidNumber: 2000
homeDirectory: /home/carol
loginShell: /bin/zsh
description: a rather long description line that goes on and on so that the
  LDIF writer has to fold it at seventy-six columns like ldapsearch does

dn: cn=staff,ou=groups,{BASE}
objectClass: posixGroup
cn: staff
gidNumber: 1000
memberUid: alice
memberUid: bob

dn: cn=admins,ou=groups,{BASE}
objectClass: groupOfNames
cn: admins
member: uid=alice,ou=people,{BASE}
"""

ALL_DNS = 8


# ---- helpers -----------------------------------------------------------------


@pytest.fixture
def db(idcache, run, tmp_path):
    """db(*args, input=None) runs `idcache db -d STORE args...`."""
    store = tmp_path / "store"

    def _db(*args, input=None, dir=store):
        return run([idcache, "db", "-d", dir, *args], input=input)

    _db.dir = store
    _db.tmp = tmp_path
    return _db


@pytest.fixture
def loaded(db):
    """A store holding SAMPLE."""
    r = db("init")
    assert r.rc == 0, r
    ldif = db.tmp / "sample.ldif"
    ldif.write_text(SAMPLE)
    r = db("import", ldif)
    assert r.rc == 0, r
    assert f"imported {ALL_DNS} entries in" in r.err
    return db


def dns(ldif_text):
    return [l[4:] for l in ldif_text.splitlines() if l.startswith("dn: ")]


def export(db):
    r = db("export")
    assert r.rc == 0, r
    return r.out


def one_line_error(r, *needles):
    """The failure is reported once, on one line, naming what failed."""
    assert r.rc == 1, r
    lines = [l for l in r.err.splitlines() if l.strip()]
    assert len(lines) == 1, r
    assert lines[0].startswith("idcache: "), r
    for n in needles:
        assert n in lines[0], (n, r)


def failed_import_keeps_store(db, text, *needles, cmd="import"):
    before = export(db)
    f = db.tmp / "bad.ldif"
    f.write_text(text)
    r = db(cmd, f)
    one_line_error(r, *needles)
    assert export(db) == before
    return r


# ---- help, version, usage ---------------------------------------------------------

SUBCOMMANDS = ["init", "import", "export", "search", "modify", "delete", "index", "check",
               "stats"]


def test_top_level_help_and_version(idcache, run):
    r = run([idcache, "--help"])
    assert r.rc == 0 and "db" in r.out and "Exit status" in r.out
    r = run([idcache, "--version"])
    assert r.rc == 0 and r.out.startswith("idcache ")
    r = run([idcache, "db", "--help"])
    assert r.rc == 0
    for sub in SUBCOMMANDS:
        assert sub in r.out


@pytest.mark.parametrize("sub", SUBCOMMANDS)
def test_subcommand_help(idcache, run, sub):
    # no -d needed for help, and help wins over everything else
    r = run([idcache, "db", sub, "--help"])
    assert r.rc == 0, r
    assert r.out.startswith(f"Usage: idcache db -d DIR {sub}")
    assert "Exit status" in r.out


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["frobnicate"],
        ["--no-such-option"],
        ["db"],
        ["db", "-d", "X", "frobnicate"],
        ["db", "search"],  # no -d
        ["db", "-d", "X", "search", "-s", "deep"],
        ["db", "-d", "X", "search", "-z", "ten"],
        ["db", "-d", "X", "search", "-z", "-1"],
        ["db", "-d", "X", "import"],
        ["db", "-d", "X", "import", "a.ldif", "b.ldif"],
        ["db", "-d", "X", "import", "--batch", "0", "a.ldif"],
        ["db", "-d", "X", "delete"],
        ["db", "-d", "X", "index"],
        ["db", "-d", "X", "index", "frob"],
        ["db", "-d", "X", "index", "add"],
        ["db", "-d", "X", "check", "extra"],
        ["db", "-d", "X", "export", "a", "b"],
        ["db", "-d", "X", "init", "--bogus"],
    ],
)
def test_usage_errors_exit_2(idcache, run, argv):
    r = run([idcache, *argv])
    assert r.rc == 2, r
    assert "usage: idcache" in r.err
    assert r.out == ""


def test_dir_may_follow_the_subcommand(loaded, idcache, run):
    r = run([idcache, "db", "search", "-d", loaded.dir, "(uid=bob)", "1.1"])
    assert r.rc == 0, r
    assert r.out == f"dn: uid=bob,ou=people,{BASE}\n\n"


# ---- init -----------------------------------------------------------------------


def test_init_default_indexes_and_refuses_existing(db):
    assert db("init").rc == 0
    r = db("index", "list")
    assert r.rc == 0
    assert sorted(r.out.split()) == sorted(
        ["objectclass", "uid", "cn", "uidnumber", "gidnumber", "member", "memberuid"])
    one_line_error(db("init"), "already")


def test_init_with_indexes(db):
    r = db("init", "-i", "uid,mail")
    assert r.rc == 0, r
    assert sorted(db("index", "list").out.split()) == ["mail", "uid"]


def test_init_bad_index_name(db):
    one_line_error(db("init", "-i", "uid,bad name"), "bad name")


# ---- import, search, export ------------------------------------------------------


def test_round_trip_is_identical(loaded, idcache, run):
    first = export(loaded)
    assert dns(first)[:3] == [BASE, f"ou=people,{BASE}", f"ou=groups,{BASE}"] or \
        dns(first)[0] == BASE
    assert len(dns(first)) == ALL_DNS
    f = loaded.tmp / "export.ldif"
    f.write_text(first)
    other = loaded.tmp / "other"
    assert run([idcache, "db", "-d", other, "init"]).rc == 0
    r = run([idcache, "db", "-d", other, "import", "-q", f])
    assert r.rc == 0 and r.err == "", r
    r = run([idcache, "db", "-d", other, "export"])
    assert r.rc == 0
    assert r.out == first


def test_export_parents_first(loaded):
    seen = set()
    for dn in dns(export(loaded)):
        parent = dn.split(",", 1)[1] if "," in dn else ""
        assert parent in seen or parent in ("dc=org", ""), dn
        seen.add(dn)


def test_export_to_file_and_subtree(loaded):
    out = loaded.tmp / "people.ldif"
    r = loaded("export", "-b", f"ou=people,{BASE}", out)
    assert r.rc == 0, r
    assert r.out == ""
    assert len(dns(out.read_text())) == 4
    assert not [p for p in loaded.tmp.iterdir() if p.name.startswith("people.ldif.")]


def test_export_missing_base(loaded):
    one_line_error(loaded("export", "-b", f"ou=nobody,{BASE}"), "ou=nobody")


def test_import_from_stdin(db):
    assert db("init").rc == 0
    r = db("import", "-", input=SAMPLE)
    assert r.rc == 0, r
    assert len(dns(export(db))) == ALL_DNS


def test_import_empty_input(db):
    assert db("init").rc == 0
    r = db("import", "-", input="")
    assert r.rc == 0, r
    assert "imported 0 entries" in r.err


def test_search_output_format(loaded):
    r = loaded("search", "(uid=alice)")
    assert r.rc == 0, r
    assert r.out.startswith(f"dn: uid=alice,ou=people,{BASE}\n")
    assert r.out.endswith("\n\n") and not r.out.endswith("\n\n\n")
    assert "description:: w6lsw6hyZSDDoCBsJ8OpY29sZQ==\n" in r.out
    r = loaded("search", "uid=carol", "description")
    lines = r.out.splitlines()
    assert all(len(l) <= 76 for l in lines), lines
    assert any(l.startswith(" ") for l in lines)  # folded


def test_search_default_filter_is_everything(loaded):
    r = loaded("search")
    assert r.rc == 0
    assert len(dns(r.out)) == ALL_DNS


@pytest.mark.parametrize(
    "scope,base,count",
    [
        ("base", f"ou=people,{BASE}", 1),
        ("one", f"ou=people,{BASE}", 3),
        ("sub", f"ou=people,{BASE}", 4),
        ("one", BASE, 2),
        ("sub", BASE, ALL_DNS),
        ("base", "", 0),
        ("one", "", 1),
    ],
)
def test_search_scopes(loaded, scope, base, count):
    r = loaded("search", "-s", scope, "-b", base, "(objectClass=*)", "1.1")
    assert r.rc == 0, r
    assert len(dns(r.out)) == count, r


def test_search_missing_base(loaded):
    one_line_error(loaded("search", "-b", f"ou=nobody,{BASE}"), "ou=nobody", "does not exist")


def test_search_size_limit(loaded):
    r = loaded("search", "-z", "2", "(objectClass=posixAccount)", "1.1")
    assert r.rc == 0, r
    assert len(dns(r.out)) == 2
    assert r.err.strip() == "idcache: size limit exceeded (2 entries)"
    r = loaded("search", "-z", "3", "(objectClass=posixAccount)", "1.1")
    assert r.rc == 0 and r.err == "" and len(dns(r.out)) == 3


def test_search_attribute_selection(loaded):
    r = loaded("search", "(uid=alice)", "cn", "UIDNUMBER")
    assert r.out == (f"dn: uid=alice,ou=people,{BASE}\ncn: Alice Liddell\n"
                     "uidNumber: 1000\n\n")
    r = loaded("search", "(uid=alice)", "1.1")
    assert r.out == f"dn: uid=alice,ou=people,{BASE}\n\n"
    r = loaded("search", "(uid=alice)", "*")
    assert "homeDirectory: /home/alice" in r.out


def test_search_bad_attribute(loaded):
    one_line_error(loaded("search", "(uid=alice)", "bad attr"), "bad attr")


@pytest.mark.parametrize(
    "flt,expect",
    [
        ("(uid=alice)", ["alice"]),
        ("uid=ALICE", ["alice"]),
        ("(cn=bob builder)", ["bob"]),
        ("(&(objectClass=posixAccount)(gidNumber=1000))", ["alice", "bob"]),
        ("(|(uid=alice)(uid=carol))", ["alice", "carol"]),
        ("(&(objectClass=posixAccount)(!(uid=bob)))", ["alice", "carol"]),
        ("(uidNumber>=1001)", ["bob", "carol"]),
        ("(uidNumber<=1001)", ["alice", "bob"]),
        ("(&(uidNumber>=1000)(uidNumber<=1999))", ["alice", "bob"]),
        ("(cn=*er*)", ["bob", "carol"]),
        ("(sn=D*s)", ["carol"]),
        ("(&(objectClass=posixAccount)(description=*))", ["alice", "carol"]),
        ("(memberUid=bob)", ["staff"]),
        (f"(member=UID=Alice, OU=People, {BASE})", ["admins"]),
        ("(&(objectClass=posixAccount)(ou:dn:=people))", ["alice", "bob", "carol"]),
        ("(uid=nobody)", []),
    ],
)
def test_search_filters(loaded, flt, expect):
    r = loaded("search", flt, "1.1")
    assert r.rc == 0, r
    got = sorted(d.split(",")[0].split("=")[1] for d in dns(r.out))
    assert got == sorted(expect), (flt, r)


@pytest.mark.parametrize("flt,pos", [("(uid=alice", "position"), ("(&(uid=a)(", "position"),
                                     ("(uid~~x)", "position"), ("()", "position")])
def test_search_bad_filter(loaded, flt, pos):
    r = loaded("search", flt)
    one_line_error(r, "filter", pos)


def test_search_bad_base_dn(loaded):
    one_line_error(loaded("search", "-b", "dc=example,,dc=org"), "position")


def test_search_explain(loaded):
    r = loaded("search", "--explain", "(uid=alice)")
    assert r.rc == 0, r
    assert "uid" in r.out
    assert r.out.count("dn:") == 0


# ---- changes: modify, delete, modrdn --------------------------------------------------


def test_modify_changetype_records(loaded):
    changes = f"""\
dn: uid=alice,ou=people,{BASE}
changetype: modify
replace: loginShell
loginShell: /bin/zsh
-
add: mail
mail: alice@example.org
-
delete: description
-

dn: uid=bob,ou=people,{BASE}
changetype: modrdn
newrdn: uid=robert
deleteoldrdn: 1

dn: uid=carol,ou=people,{BASE}
changetype: delete

dn: uid=dave,ou=people,{BASE}
changetype: add
objectClass: posixAccount
uid: dave
cn: Dave
uidNumber: 3000
gidNumber: 3000
homeDirectory: /home/dave
"""
    f = loaded.tmp / "changes.ldif"
    f.write_text(changes)
    r = loaded("modify", f)
    assert r.rc == 0, r
    r = loaded("search", "(uid=alice)", "loginShell", "mail", "description")
    assert r.out == (f"dn: uid=alice,ou=people,{BASE}\nloginShell: /bin/zsh\n"
                     "mail: alice@example.org\n\n")
    assert loaded("search", "(uid=bob)").out == ""
    assert dns(loaded("search", "(uid=robert)", "1.1").out) == [f"uid=robert,ou=people,{BASE}"]
    assert loaded("search", "(uid=carol)").out == ""
    assert dns(loaded("search", "(uidNumber=3000)", "1.1").out) == [f"uid=dave,ou=people,{BASE}"]
    assert loaded("check").rc == 0


def test_import_applies_changetype_records(loaded):
    r = loaded("import", "-", input=f"dn: uid=bob,ou=people,{BASE}\nchangetype: delete\n")
    assert r.rc == 0, r
    assert loaded("search", "(uid=bob)").out == ""


def test_delete_command(loaded):
    people = f"ou=people,{BASE}"
    r = loaded("delete", people)
    one_line_error(r, people, "-r")
    r = loaded("delete", f"uid=alice,{people}", f"uid=bob,{people}")
    assert r.rc == 0, r
    assert len(dns(loaded("search", "-b", people, "(objectClass=*)", "1.1").out)) == 2
    r = loaded("delete", "-r", people)
    assert r.rc == 0, r
    assert loaded("search", "(uid=carol)").out == ""
    assert len(dns(export(loaded))) == ALL_DNS - 4
    assert loaded("check").rc == 0


def test_long_dns_delete_and_export(loaded):
    """dn2id keys of 511 bytes or more are a 503-byte prefix and a hash, so
    a parent, its siblings and its children share the start of their keys:
    a leaf among them deletes, a parent does not, and a subtree exports
    parents first and imports again."""
    p1, p2 = f"ou={'a' * 500}1,{BASE}", f"ou={'a' * 500}2,{BASE}"
    kids = [(f"uid=c{i},{p1}", "uid", f"c{i}") for i in range(8)]
    grandkids = [(f"ou=g,uid=c{i},{p1}", "ou", "g") for i in range(8)]
    ldif = "".join(f"dn: {dn}\nobjectClass: extensibleObject\n{a}: {v}\n\n"
                   for dn, a, v in [(p1, "ou", "a" * 500 + "1"), (p2, "ou", "a" * 500 + "2")]
                   + kids + grandkids)
    f = loaded.tmp / "long.ldif"
    f.write_text(ldif)
    r = loaded("import", f)
    assert r.rc == 0, r
    one_line_error(loaded("delete", p1), "ou=aaaa", "-r")
    r = loaded("delete", p2, kids[0][0].replace("uid=c0", "ou=g,uid=c0"))
    assert r.rc == 0, r
    sub = loaded.tmp / "sub.ldif"
    r = loaded("export", "-b", p1, sub)
    assert r.rc == 0, r
    seen = {BASE}
    for dn in dns(sub.read_text().replace("\n ", "")):  # unfolded
        assert dn.split(",", 1)[1] in seen, dn
        seen.add(dn)
    assert len(seen) == 1 + 1 + 8 + 7
    r = loaded("init", dir=loaded.tmp / "again")
    assert r.rc == 0, r
    r = loaded("import", sub, dir=loaded.tmp / "again")
    assert r.rc == 0, r
    r = loaded("delete", "-r", p1)
    assert r.rc == 0, r
    assert len(dns(export(loaded))) == ALL_DNS
    assert loaded("check").rc == 0


def test_delete_is_all_or_nothing(loaded):
    before = export(loaded)
    r = loaded("delete", f"uid=alice,ou=people,{BASE}", f"uid=nobody,ou=people,{BASE}")
    one_line_error(r, "uid=nobody")
    assert export(loaded) == before


def test_delete_bad_dn(loaded):
    one_line_error(loaded("delete", "uid=a,,dc=x"), "position")


# ---- indexes ------------------------------------------------------------------------


def test_index_add_remove_list(loaded):
    assert "mail" not in loaded("index", "list").out.split()
    assert loaded("index", "add", "mail").rc == 0
    assert "mail" in loaded("index", "list").out.split()
    one_line_error(loaded("index", "add", "mail"), "mail", "already")
    assert loaded("check").rc == 0
    assert loaded("index", "remove", "uid").rc == 0
    assert "uid" not in loaded("index", "list").out.split()
    one_line_error(loaded("index", "remove", "uid"), "uid", "not indexed")
    # searches still answer without the index
    assert dns(loaded("search", "(uid=alice)", "1.1").out) == [f"uid=alice,ou=people,{BASE}"]
    assert loaded("check").rc == 0


def test_index_explain_changes(loaded):
    with_index = loaded("search", "--explain", "(uid=alice)").out
    assert loaded("index", "remove", "uid").rc == 0
    without = loaded("search", "--explain", "(uid=alice)").out
    assert with_index != without


# ---- check and stats -------------------------------------------------------------------


def test_check_good_store(loaded):
    r = loaded("check")
    assert r.rc == 0, r
    assert r.out == f"store is consistent ({ALL_DNS} entries)\n"


def test_stats(loaded):
    r = loaded("stats")
    assert r.rc == 0, r
    fields = dict(l.split(":", 1) for l in r.out.splitlines())
    assert int(fields["entries"].split()[0]) == ALL_DNS
    assert int(fields["next id"].split()[0]) > ALL_DNS
    for k in ("map size", "used", "file size", "format version", "indexes"):
        assert k in fields, r.out
    assert "uid" in fields["indexes"].split()


# ---- bad input: exit 1, one line naming where, store unchanged ---------------------------


def test_missing_store_dir(db):
    r = db("search", dir=db.tmp / "nowhere")
    one_line_error(r, "nowhere")


def test_dir_without_store(db):
    os.mkdir(db.dir)
    for args in (["search"], ["import", "-"], ["stats"], ["check"], ["index", "list"]):
        r = db(*args, input="")
        one_line_error(r, str(db.dir), "init")


def test_import_missing_file(loaded):
    one_line_error(loaded("import", loaded.tmp / "nope.ldif"), "nope.ldif")


def test_import_malformed_ldif(loaded):
    text = f"dn: uid=x,ou=people,{BASE}\nobjectClass: top\nuid: x\n\nthis is not ldif\n"
    failed_import_keeps_store(loaded, text, "bad.ldif:5")


def test_import_bad_base64(loaded):
    text = f"dn: uid=x,ou=people,{BASE}\nobjectClass: top\nuid:: !!!notbase64\n"
    failed_import_keeps_store(loaded, text, "bad.ldif:3")


def test_import_malformed_dn(loaded):
    text = (f"dn: uid=x,ou=people,{BASE}\nobjectClass: top\nuid: x\n\n"
            f"dn: uid=y,,ou=people,{BASE}\nobjectClass: top\nuid: y\n")
    failed_import_keeps_store(loaded, text, "bad.ldif:5", "position")


def test_import_bad_integer(loaded):
    text = (f"dn: uid=x,ou=people,{BASE}\nobjectClass: top\nuid: x\n\n"
            f"dn: uid=y,ou=people,{BASE}\nobjectClass: posixAccount\nuid: y\n"
            "uidNumber: 12a\n")
    failed_import_keeps_store(loaded, text, "bad.ldif:5", "uid=y")


def test_import_duplicate_entry(loaded):
    text = f"dn: uid=x,ou=people,{BASE}\nobjectClass: top\nuid: x\n\n" \
           f"dn: uid=alice,ou=people,{BASE}\nobjectClass: top\nuid: alice\n"
    failed_import_keeps_store(loaded, text, "bad.ldif:5", "uid=alice")


def test_import_missing_parent(loaded):
    text = f"dn: uid=x,ou=nowhere,{BASE}\nobjectClass: top\nuid: x\n"
    failed_import_keeps_store(loaded, text, "bad.ldif:1", "uid=x,ou=nowhere")


def test_import_failed_change_record(loaded):
    text = (f"dn: uid=alice,ou=people,{BASE}\nchangetype: modify\nreplace: cn\ncn: A\n-\n\n"
            f"dn: uid=nobody,ou=people,{BASE}\nchangetype: delete\n")
    failed_import_keeps_store(loaded, text, "bad.ldif:7", "uid=nobody")


def test_modify_failure_names_line(loaded):
    text = (f"dn: uid=alice,ou=people,{BASE}\nchangetype: modify\n"
            "delete: mail\nmail: nope@example.org\n-\n")
    failed_import_keeps_store(loaded, text, "bad.ldif:1", cmd="modify")


def test_import_stdin_error_names_stdin(loaded):
    before = export(loaded)
    r = loaded("import", "-", input="dn: uid=x,ou=people,dc=example,dc=org\nbogus line\n")
    one_line_error(r, "stdin:2")
    assert export(loaded) == before


def test_batch_import_commits_earlier_batches(db):
    assert db("init").rc == 0
    text = SAMPLE + f"\ndn: uid=z,ou=nowhere,{BASE}\nobjectClass: top\nuid: z\n"
    f = db.tmp / "batch.ldif"
    f.write_text(text)
    r = db("import", "--batch", "3", f)
    one_line_error(r, "batch.ldif:", "6 records")
    assert len(dns(export(db))) == 6
    assert db("check").rc == 0


def test_batch_import_success(db):
    assert db("init").rc == 0
    r = db("import", "--batch", "2", "-", input=SAMPLE)
    assert r.rc == 0, r
    assert len(dns(export(db))) == ALL_DNS


def _unshare_works():
    return shutil.which("unshare") is not None and subprocess.run(
        ["unshare", "-m", "true"], capture_output=True).returncode == 0


@pytest.mark.skipif(os.geteuid() != 0 or not _unshare_works(),
                    reason="needs root and unshare -m for a read-only bind mount")
def test_read_only_mount(loaded, idcache):
    """Root ignores mode bits, so a read-only mount stands in for a
    read-only store directory: writing fails cleanly, reading still works."""
    d = str(loaded.dir)
    script = ('mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && shift && exec "$@"')
    r = subprocess.run(["unshare", "-m", "sh", "-c", script, "sh", d, str(idcache), "db",
                        "-d", d, "import", "-"],
                       input=f"dn: uid=x,ou=people,{BASE}\nuid: x\n", capture_output=True,
                       text=True)
    assert r.returncode == 1, r
    assert len(r.stderr.strip().splitlines()) == 1 and d in r.stderr, r.stderr
    r = subprocess.run(["unshare", "-m", "sh", "-c", script, "sh", d, str(idcache), "db",
                        "-d", d, "search", "(uid=alice)", "1.1"], capture_output=True, text=True)
    assert r.returncode == 0, r
    assert "uid=alice" in r.stdout


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes to read-only directories")
def test_read_only_store_dir(loaded):
    os.chmod(loaded.dir, 0o555)
    try:
        r = loaded("import", "-", input=f"dn: uid=x,ou=people,{BASE}\nuid: x\n")
        one_line_error(r, str(loaded.dir))
        assert loaded("search", "(uid=alice)", "1.1").rc == 0
    finally:
        os.chmod(loaded.dir, 0o755)


@pytest.mark.skipif(shutil.which("flock") is None, reason="needs flock(1) from util-linux")
def test_second_writer_is_refused(loaded):
    before = export(loaded)
    lock = loaded.dir / "write.lock"
    holder = subprocess.Popen(["flock", "-x", str(lock), "sleep", "5"])
    try:
        time.sleep(0.3)
        r = loaded("import", "-", input=f"dn: uid=x,ou=people,{BASE}\nuid: x\nobjectClass: top\n")
        one_line_error(r, "another process")
        r = loaded("delete", f"uid=bob,ou=people,{BASE}")
        one_line_error(r, "another process")
        # readers are not blocked by a writer
        assert loaded("search", "(uid=bob)", "1.1").rc == 0
    finally:
        holder.kill()
        holder.wait()
    assert export(loaded) == before
