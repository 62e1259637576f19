#!/bin/bash
# mkcerts.sh DIR: a test CA and two server certificates signed by it —
# server.pem for 127.0.0.1/localhost (must verify) and wrong.pem for
# wrong.example only (must be refused when connecting to 127.0.0.1).
set -eu
D=$1
mkdir -p "$D"
cd "$D"
[ -s wrong.pem ] && exit 0
q() { "$@" >/dev/null 2>&1; }
q openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 -subj "/CN=idcache test CA"
for n in server wrong; do
	if [ $n = server ]; then san="IP:127.0.0.1,DNS:localhost"; cn=127.0.0.1; else san="DNS:wrong.example"; cn=wrong.example; fi
	q openssl req -newkey rsa:2048 -nodes -keyout $n.key -out $n.csr -subj "/CN=$cn"
	printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth\n' "$san" > $n.ext
	q openssl x509 -req -in $n.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out $n.pem -days 2 -extfile $n.ext
done
chmod 644 ./*.key
