#!/usr/bin/python3
"""Deterministic passwd/group generator for the end-to-end tests and the demo.

The same arguments always give the same bytes. Besides plain entries the
data holds the odd but valid lines real files contain: empty gecos and
shell, empty home, gecos with spaces, commas and UTF-8, uid/gid 0 and
4294967294, duplicate uids and gids (first wins for lookups by id), groups
without members, members that are not users ("ghosts"), a user in 200
groups, a group with 1,000 members, names with '.', '_', '-', '$' (Samba
machine accounts), upper case and UTF-8; and malformed lines glibc's files
module skips (bad numbers, too few fields, blank lines, comments).

With parity=True it also holds what glibc serves line by line: a name
given twice (the first answers by name, the second only by its id and in
enumeration), names differing only in case, the password fields "*", "!"
and "" (served as they are; a hash never is), and a group line longer
than 64 KiB (7,000 members).

Left out on purpose, because the cache cannot and should not mirror them
(each has its own targeted test in test_e2e_nss.py):
  - NIS compat lines (+, +@netgroup, -name): glibc's files module returns
    them from enumeration as entries; idcache ignores them (docs/DESIGN.md §6).
  - a user in two groups that share a gid: files' initgroups reports the
    gid twice, idcache once.
  - a password hash in the passwd field: idcache serves "x" instead.

Usage: gen_nss_data.py [--users N] [--groups M] [--seed S] [--in-many K]
                       [--no-malformed] OUTDIR
writes OUTDIR/passwd and OUTDIR/group.
"""
import argparse
import os
import random
import sys

GECOS = [
    "",
    "User {i}",
    "Last {i}, First,Room 101,+1 555 0100,",
    "Zoë Ångström 日本語 {i}",
    "with  two  spaces {i}",
    "comma,only",
    "x",
]
SHELLS = ["/bin/bash", "", "/usr/sbin/nologin", "/bin/sh", "/bin/zsh"]

# Lines glibc's files module skips; {i} keeps them distinct.
BAD_PASSWD = [
    "broken{i}:x:12a:100:bad uid:/:/bin/sh",   # uid not a number
    "broken{i}:x::100::/:",                    # empty uid
    "broken{i}:x:1234",                        # no gid
    "broken{i}",                               # name only
    "",                                        # blank line
    "# comment {i}",                           # comment
    "   # indented comment {i}",
    "broken{i}:x:-1:100::/:",                  # negative uid
    "broken{i}:x:4294967296:100::/:",          # uid past 2^32
]
BAD_GROUP = [
    "badgrp{i}:x:abc:user00001",
    "badgrp{i}:x::user00001",
    "badgrp{i}",
    "",
    "# comment {i}",
]


def user_name(i):
    """Names in several styles; all distinct even ignoring case."""
    style = i % 10
    if style == 5:
        return f"first.last{i}"
    if style == 6:
        return f"svc_app{i}"
    if style == 7:
        return f"dash-name-{i}"
    if style == 8:
        return f"host{i}$"
    if style == 9:
        return f"Mixed{i}Case"
    return f"user{i:05d}"


def group_name(j):
    style = j % 6
    if style == 1:
        return f"team.{j}"
    if style == 2:
        return f"dev_ops{j}"
    if style == 3:
        return f"proj-{j}"
    if style == 4:
        return f"smb{j}$"
    if style == 5:
        return f"Staff{j}"
    return f"grp{j:03d}"


class Data:
    """Generated passwd/group lines plus what the tests need to know."""

    def __init__(self):
        self.passwd_lines = []
        self.group_lines = []
        self.users = []   # (name, uid, gid) of valid lines, in file order
        self.groups = []  # (name, gid, [members]) of valid lines, in file order
        self.bad_passwd = 0
        self.bad_group = 0
        self.big_user = None
        self.huge_group = None
        self.huge_line_group = None

    def passwd_text(self):
        return "".join(line + "\n" for line in self.passwd_lines)

    def group_text(self):
        return "".join(line + "\n" for line in self.group_lines)

    def add_user(self, name, uid, gid, gecos="", home=None, shell="/bin/sh", passwd="x"):
        home = f"/home/{name}" if home is None else home
        self.passwd_lines.append(f"{name}:{passwd}:{uid}:{gid}:{gecos}:{home}:{shell}")
        self.users.append((name, uid, gid))

    def add_group(self, name, gid, members, passwd="x"):
        self.group_lines.append(f"{name}:{passwd}:{gid}:{','.join(members)}")
        self.groups.append((name, gid, list(members)))

    # Keys for lookups, including some that must not be found.
    def user_keys(self):
        keys = [u[0] for u in self.users] + [str(u[1]) for u in self.users]
        keys += ["nosuchuser", "USER00001", "mixed9case", "user00001 ", "55555",
                 "4294967295", "broken0"]
        return keys

    def group_keys(self):
        keys = [g[0] for g in self.groups] + [str(g[1]) for g in self.groups]
        keys += ["nosuchgroup", "GRP000", "staff5", "44444", "4294967295", "badgrp0"]
        return keys


def add_parity_users(d):
    """Lines glibc serves one by one: see the module's docstring."""
    d.add_user("dupname", 2013, 100, "first line", "/home/dupname", "/bin/sh")
    d.add_user("nopass", 2015, 100, "empty password field", "/", "/bin/sh", passwd="")
    d.add_user("dupname", 2014, 100, "second line", "/home/dupname2", "/bin/sh", passwd="*")
    d.add_user("caseuser", 2016, 100, "lower", "/", "/bin/sh", passwd="!")
    d.add_user("CaseUser", 2017, 100, "mixed", "/", "/bin/sh")
    d.add_user("CASEUSER", 2018, 100, "upper", "/", "/bin/sh", passwd="!!")
    d.add_user("dupname", 2013, 100, "third line, uid of the first", "/", "/bin/sh")


def add_parity_groups(d, names):
    d.add_group("dupgroup", 2013, ["caseuser", "dupname"])
    d.add_group("dupgroup", 2014, ["CaseUser", "dupname"], passwd="!")
    d.add_group("casegroup", 2016, ["CASEUSER"], passwd="*")
    d.add_group("CaseGroup", 2017, ["caseuser"], passwd="")
    d.huge_line_group = "hugeline"
    ghosts = [f"ghost-member-{k:05d}" for k in range(7000 - 3)]
    d.add_group("hugeline", 2019, ghosts[:3000] + ["dupname", names[0], "CaseUser"] + ghosts[3000:])


def generate(n_users=2000, n_groups=300, seed=1, in_many=200, huge=1000, malformed=True,
             parity=False):
    """Build the data. in_many: how many groups the big user is in (needs
    n_groups >= in_many); huge: members of the largest group; parity: the
    lines add_parity_users/groups write."""
    if n_groups < in_many:
        raise ValueError("n_groups must be >= in_many")
    rng = random.Random(seed)
    d = Data()

    # Group ids in a shuffled order, so that file order, gid order and name
    # order all differ (initgroups and enumeration must keep file order).
    gid_perm = list(range(n_groups))
    rng.shuffle(gid_perm)
    group_gids = [20000 + p for p in gid_perm]
    uid_perm = list(range(n_users))
    rng.shuffle(uid_perm)

    # ---- users
    d.add_user("root", 0, 0, "root", "/root", "/bin/bash")
    d.add_user("daemon", 1, 1, "daemon", "/usr/sbin", "/usr/sbin/nologin")
    d.add_user("nobody", 65534, 65534, "nobody", "/nonexistent", "/usr/sbin/nologin")
    d.add_user("nfsnobody", 4294967294, 4294967294, "Anonymous NFS User", "/var/lib/nfs",
               "/sbin/nologin")
    d.big_user = "biguser"
    d.add_user("biguser", 9999, group_gids[0], "Big User,,,", "/home/biguser", "/bin/bash")
    d.add_user("josé", 9998, group_gids[1], "José Ñúñez", "/home/josé", "/bin/bash")
    d.add_user("3com", 9997, 9997, "", "", "")          # name starting with a digit
    d.add_user("a.b_c-d$", 9996, group_gids[2], "all the punctuation", "/", "/bin/sh")
    d.add_user("nullfields", 9995, 9995, "", "", "")    # empty gecos, home and shell
    d.add_user("tabgecos", 9994, 9994, "tab\there", "/home/tab", "/bin/sh")
    if parity:
        add_parity_users(d)

    prev_uid = None
    names = []
    for i in range(n_users):
        name = user_name(i)
        uid = 10000 + uid_perm[i]
        if i % 97 == 96 and prev_uid is not None:
            uid = prev_uid              # duplicate uid: first line wins getpwuid
        prev_uid = uid
        if i % 50 == 49:
            gid = 50000 + i             # primary group not in the group file
        else:
            gid = group_gids[i % n_groups]
        gecos = GECOS[i % len(GECOS)].format(i=i)
        home = "" if i % 13 == 12 else None
        d.add_user(name, uid, gid, gecos, home, SHELLS[i % len(SHELLS)])
        names.append(name)
        if malformed and i % 250 == 125:
            d.passwd_lines.append(BAD_PASSWD[(i // 250) % len(BAD_PASSWD)].format(i=i))
            d.bad_passwd += 1
    if malformed:
        for k, bad in enumerate(BAD_PASSWD):
            d.passwd_lines.append(bad.format(i=10000 + k))
            d.bad_passwd += 1
    d.add_user("lastuser", 9990, group_gids[3], "the last line", "/home/lastuser", "/bin/sh")

    # ---- groups
    d.add_group("root", 0, [])
    d.add_group("nogroup", 65534, [])
    d.add_group("nfsnobody", 4294967294, [])
    d.add_group("équipe", 9998, ["josé", "biguser"])
    d.huge_group = "huge"
    d.add_group("huge", 19999, names[:huge])
    if parity:
        add_parity_groups(d, names)
    dup_gid_groups = set()
    for j in range(n_groups):
        gid = group_gids[j]
        if j % 40 == 39:
            # Duplicate gid: first line wins getgrgid. Members are ghosts
            # only, so no user is in two groups sharing a gid.
            gid = group_gids[j - 1]
            dup_gid_groups.add(j)
            members = [f"ghost{j}a", f"ghost{j}b"]
        elif j % 10 == 3:
            members = []                # no members
        else:
            members = rng.sample(names, rng.randint(1, 30))
            if j % 7 == 0:
                members.append(f"ghost{j}")  # not a user anywhere
        if j < in_many and j not in dup_gid_groups:
            members.insert(rng.randint(0, len(members)), "biguser")
        d.add_group(group_name(j), gid, members)
        if malformed and j % 60 == 30:
            d.group_lines.append(BAD_GROUP[(j // 60) % len(BAD_GROUP)].format(i=j))
            d.bad_group += 1
    # Top up biguser to in_many groups with extra groups (the skipped
    # duplicate-gid neighbours above left it short).
    have = sum(1 for g in d.groups if "biguser" in g[2])
    extra = 0
    while have < in_many:
        d.add_group(f"extra{extra}", 30000 + extra, ["biguser", f"ghost-extra{extra}"])
        extra += 1
        have += 1
    if malformed:
        for k, bad in enumerate(BAD_GROUP):
            d.group_lines.append(bad.format(i=10000 + k))
            d.bad_group += 1
    d.add_group("lastgroup", 9990, ["lastuser", "user00000"])
    return d


def main(argv=None):
    ap = argparse.ArgumentParser(description="Write a deterministic passwd and group file.")
    ap.add_argument("--users", type=int, default=2000)
    ap.add_argument("--groups", type=int, default=300)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--in-many", type=int, default=200,
                    help="number of groups the user 'biguser' is in")
    ap.add_argument("--huge", type=int, default=1000, help="members of group 'huge'")
    ap.add_argument("--no-malformed", action="store_true")
    ap.add_argument("outdir")
    a = ap.parse_args(argv)
    d = generate(a.users, a.groups, a.seed, a.in_many, min(a.huge, a.users),
                 not a.no_malformed)
    os.makedirs(a.outdir, exist_ok=True)
    with open(os.path.join(a.outdir, "passwd"), "w", encoding="utf-8") as f:
        f.write(d.passwd_text())
    with open(os.path.join(a.outdir, "group"), "w", encoding="utf-8") as f:
        f.write(d.group_text())
    print(f"{len(d.users)} users, {len(d.groups)} groups, {d.bad_passwd + d.bad_group} "
          f"malformed lines in {a.outdir}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
