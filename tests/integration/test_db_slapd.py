"""The store's matching rules beside slapd's, on non-ASCII text.

The same LDIF goes into Debian's slapd (back-mdb, loaded with slapadd) and
into a store (`idcache db import`); every equality and substring filter below
(caseIgnoreMatch, and caseExactMatch through extensible filters) must select
the same entries in both. The values hold the shapes where an
ASCII-only rule goes wrong: letters with diacritics, sharp s, the Turkish
dotted capital I, compatibility characters (the ligature fi, full-width
letters), combining sequences beside precomposed letters, runs of spaces and
no-break spaces, Greek final sigma.

Where RFC 4518 and slapd part ways, idcache follows the RFC (full Unicode
case folding: ß matches "ss", İ matches "i" + U+0307 and not "i"); those
filters are listed in DIVERGE with both answers, so a change on either side
shows.
"""
import base64
import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

LDAP_DIR = Path(__file__).resolve().parents[1] / "ldap"
SLAPD = "/usr/sbin/slapd"
BASE = "dc=example,dc=com"

pytestmark = [
    pytest.mark.usefixtures("as_root"),
    pytest.mark.skipif(not (os.access(SLAPD, os.X_OK) and shutil.which("ldapsearch")),
                       reason="needs Debian's slapd and ldap-utils "
                              "(apt-get install slapd ldap-utils)"),
]

# One entry per value; 89 of them start with "ünïcode" in some case.
VALUES = [
    "Ünïcode rocks", "ünïcode", "UNÏCODE x", "Unicode plain", "unïcode",
    "Straße", "STRASSE", "strasse", "Maß", "MASS",
    "İstanbul", "istanbul", "ISTANBUL", "ıstanbul",
    "ﬁle server", "file server", "FILE SERVER", "ﬀ",
    "ＡＢＣ full", "abc full", "ABC FULL", "ｆｕｌｌ ｗｉｄｔｈ",
    "Café", "Cafe\u0301", "CAFÉ", "cafe", "CAFE\u0301 noir",
    "two  inner   spaces", "two inner spaces", "  two inner spaces  ",
    "nbsp\u00a0here", "nbsp here", "ideographic\u3000space",
    "ΣΊΣΥΦΟΣ", "σίσυφος", "Ωmega", "ωMEGA",
    "Ångström", "A\u030angstro\u0308m", "Ǆemal", "ǆemal",
]
VALUES += [f"{'ÜNÏCODE' if i % 3 == 0 else 'Ünïcode' if i % 3 == 1 else 'ünÏcOdE'} entry {i}"
           for i in range(87)]

FILTERS = [
    "(description=ünïcode*)", "(description=ÜNÏCODE*)", "(description=*nïco*)",
    "(description=ünïcode)", "(description=unicode*)", "(description=*rocks)",
    "(description=straße)", "(description=*aße)", "(description=strasse)",
    "(description=maß)",
    "(description=istanbul)", "(description=İstanbul)", "(description=*stanbul)",
    "(description=ıstanbul)",
    "(description=file server)", "(description=ﬁle*)", "(description=*le ser*)",
    "(description=ﬀ)", "(description=ff)",
    "(description=abc full)", "(description=ＡＢＣ*)", "(description=*ｆｕｌｌ)",
    "(description=full width)",
    "(description=café)", "(description=cafe\u0301)", "(description=CAFÉ*)",
    "(description=*afé*)", "(description=cafe)", "(description=*noir)",
    "(description=two inner spaces)", "(description=two    inner spaces)",
    "(description=*inner  spa*)", "(description=two *)",
    "(description=nbsp here)", "(description=nbsp\u00a0\u00a0here)",
    "(description=ideographic space)",
    "(description=σίσυφος)", "(description=ΣΊΣΥΦΟΣ)", "(description=*ΥΦΟΣ)",
    "(description=ωmega)", "(description=ΩMEGA*)",
    "(description=ångström)", "(description=A\u030aNGSTRÖM)",
    "(description=ǆemal)", "(description=ǅemal)", "(description=dže*)",
    # caseExactMatch through extensible filters: NFKC, spaces, no case folding
    "(description:caseExactMatch:=Straße)", "(description:caseExactMatch:=straße)",
    "(description:caseExactMatch:=Café)", "(description:caseExactMatch:=café)",
    "(description:caseExactMatch:=file server)", "(description:caseExactMatch:=ABC full)",
    "(description:caseExactMatch:=two   inner spaces)",
    "(description:caseExactMatch:=ΣΊΣΥΦΟΣ)", "(description:caseExactMatch:=İstanbul)",
]

# filter: (slapd's count, idcache's count) where RFC 4518 and slapd disagree.
# slapd lowercases one code point at a time; RFC 4518 folds case fully
# (RFC 3454 table B.2): ß is "ss", final sigma is sigma, İ is i + U+0307.
DIVERGE = {
    "(description=straße)": (1, 3),
    "(description=*aße)": (1, 3),
    "(description=strasse)": (2, 3),
    "(description=maß)": (1, 2),
    "(description=istanbul)": (3, 2),
    "(description=İstanbul)": (3, 1),
    "(description=σίσυφος)": (1, 2),
    "(description=ΣΊΣΥΦΟΣ)": (1, 2),
    "(description=*ΥΦΟΣ)": (1, 2),
}


def ldif_text():
    out = [f"dn: {BASE}\nobjectClass: top\nobjectClass: domain\ndc: example\n",
           f"dn: ou=people,{BASE}\nobjectClass: organizationalUnit\nou: people\n"]
    for i, v in enumerate(VALUES):
        b64 = base64.b64encode(v.encode()).decode()
        out.append(f"dn: uid=u{i:03d},ou=people,{BASE}\nobjectClass: inetOrgPerson\n"
                   f"uid: u{i:03d}\ncn: u{i:03d}\nsn: u\ndescription:: {b64}\n")
    return "\n".join(out)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def both(tmp_path_factory, idcache):
    """(slapd URI, (indexed store, scanned store), idcache) with the same LDIF."""
    work = tmp_path_factory.mktemp("slapd-diff")
    ldif = work / "data.ldif"
    ldif.write_text(ldif_text())
    # one store searched through an index on description, one by a scan
    stores = (work / "indexed", work / "scanned")
    for store, init in zip(stores, (["init", "-i", "description,cn"], ["init", "-i", "cn"])):
        for argv in (init, ["import", str(ldif)], ["check"]):
            p = subprocess.run([str(idcache), "db", "-d", str(store), *argv],
                               capture_output=True, text=True, timeout=60)
            assert p.returncode == 0, p.stderr
    port = free_port()
    sdir = work / "slapd"
    p = subprocess.run([str(LDAP_DIR / "slapd.sh"), "start", str(sdir), str(port), str(ldif)],
                       capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, SLAPD_LOAD="slapadd"))
    if p.returncode != 0:
        pytest.fail(f"slapd did not start: {p.stderr}")
    try:
        yield f"ldap://127.0.0.1:{port}", stores, idcache
    finally:
        subprocess.run([str(LDAP_DIR / "slapd.sh"), "stop", str(sdir)], timeout=30)


def count_dns(ldif_out):
    return sum(1 for l in ldif_out.splitlines() if l.startswith("dn:"))


def slapd_count(uri, flt):
    p = subprocess.run(["ldapsearch", "-x", "-LLL", "-H", uri, "-b", BASE, flt, "1.1"],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, (flt, p.stderr)
    return count_dns(p.stdout)


def idcache_count(stores, idcache, flt):
    """The count of the indexed store; the scanned one must agree."""
    counts = []
    for store in stores:
        p = subprocess.run([str(idcache), "db", "-d", str(store), "search", "-b", BASE, flt,
                            "1.1"], capture_output=True, text=True, timeout=30)
        assert p.returncode == 0, (flt, p.stderr)
        counts.append(count_dns(p.stdout))
    assert counts[0] == counts[1], (flt, "indexed, scanned", counts)
    return counts[0]


def test_report_filter_finds_what_slapd_finds(both):
    uri, stores, idcache = both
    flt = "(description=ünïcode*)"
    assert slapd_count(uri, flt) == idcache_count(stores, idcache, flt) == 89


@pytest.mark.parametrize("flt", FILTERS)
def test_same_count_as_slapd(both, flt):
    uri, stores, idcache = both
    got = (slapd_count(uri, flt), idcache_count(stores, idcache, flt))
    if flt in DIVERGE:
        assert got == DIVERGE[flt], (flt, got)
    else:
        assert got[0] == got[1], (flt, got)
