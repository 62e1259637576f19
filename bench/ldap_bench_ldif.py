#!/usr/bin/env python3
# ldap_bench_ldif.py OUT [USERS] [GROUPS] [MEMBERS]: the SSSD performance
# scenario in LDIF (rfc2307bis): USERS users (default 10,000) under
# ou=people, a user "target", and GROUPS groups (200) of MEMBERS member DNs
# (300: target + random users); every 10th group also has the previous
# group as a member (nesting). Deterministic.
import random, sys
out = sys.argv[1]
nu = int(sys.argv[2]) if len(sys.argv) > 2 else 10000
ng = int(sys.argv[3]) if len(sys.argv) > 3 else 200
nm = int(sys.argv[4]) if len(sys.argv) > 4 else 300
rnd = random.Random(2307)
B = "dc=example,dc=com"
with open(out, "w") as f:
    f.write(f"dn: {B}\nobjectClass: dcObject\nobjectClass: organization\no: Example\ndc: example\n\n")
    for ou in ("people", "groups"):
        f.write(f"dn: ou={ou},{B}\nobjectClass: organizationalUnit\nou: {ou}\n\n")
    def user(name, uid):
        f.write(f"dn: uid={name},ou=people,{B}\nobjectClass: account\nobjectClass: posixAccount\n"
                f"uid: {name}\ncn: {name}\nuidNumber: {uid}\ngidNumber: {uid}\n"
                f"homeDirectory: /home/{name}\nloginShell: /bin/bash\ngecos: User {name}\n\n")
    user("target", 99999)
    for i in range(nu):
        user(f"user{i}", 100000 + i)
    for g in range(ng):
        f.write(f"dn: cn=g{g:03d},ou=groups,{B}\nobjectClass: posixGroup\nobjectClass: extensibleObject\n"
                f"cn: g{g:03d}\ngidNumber: {50000 + g}\n")
        f.write(f"member: uid=target,ou=people,{B}\n")
        for u in rnd.sample(range(nu), nm - 1):
            f.write(f"member: uid=user{u},ou=people,{B}\n")
        if g % 10 == 0 and g > 0:
            f.write(f"member: cn=g{g - 1:03d},ou=groups,{B}\n")
        f.write("\n")
