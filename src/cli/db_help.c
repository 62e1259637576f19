/*
 * Help texts of `idcache db` and its subcommands: what --help prints and
 * the synopsis a usage error shows. Kept in step with man/idcache.1.
 */
#include "cli.h"

#include <string.h>

struct db_help_text {
	const char *name; /* NULL: `idcache db` itself */
	const char *synopsis;
	const char *body;
};

static const char exit_status[] =
    "Exit status:\n"
    "  0  success\n"
    "  1  the operation failed; a one-line message on stderr says what\n"
    "     and where, and the store is unchanged\n"
    "  2  wrong command line\n";

static const struct db_help_text texts[] = {
    {NULL, "idcache db -d DIR COMMAND [ARGS...]",
     "Administer an idcache directory store directly, without the daemon.\n"
     "\n"
     "Commands:\n"
     "  init      create a store\n"
     "  import    add entries and apply changes from LDIF, in one transaction\n"
     "  export    write every entry as LDIF, re-importable\n"
     "  search    search with an LDAP filter and print LDIF\n"
     "  modify    apply LDIF change records\n"
     "  delete    delete entries (or subtrees)\n"
     "  index     list, add or remove attribute indexes\n"
     "  check     verify the store's consistency\n"
     "  stats     print sizes and counts\n"
     "\n"
     "Options:\n"
     "  -d, --dir DIR   the store directory (required; may also follow COMMAND)\n"
     "  -h, --help      show this help; 'idcache db COMMAND --help' for a command\n"
     "\n"
     "Commands that only read (search, export, check, stats, index list) open the\n"
     "store read-only and run alongside a writer. Only one process writes at a time;\n"
     "a second writer fails at once rather than waiting.\n"},
    {"init", "idcache db -d DIR init [-i ATTR[,ATTR...]]",
     "Create an empty store in DIR (created when missing). Fails when DIR already\n"
     "holds a store.\n"
     "\n"
     "Options:\n"
     "  -i, --index ATTR,...  attributes to index for equality and presence\n"
     "                        (default: objectClass,uid,cn,uidNumber,gidNumber,\n"
     "                        member,memberUid); change later with 'db index'\n"
     "\n"
     "Example:\n"
     "  idcache db -d /tmp/store init -i uid,uidNumber,memberUid\n"},
    {"import", "idcache db -d DIR import [-q] [--batch N] FILE.ldif|-",
     "Read LDIF (RFC 2849) from FILE, or standard input for '-', and apply it: plain\n"
     "entries are added; records with a changetype (add, delete, modify, modrdn)\n"
     "are applied as such. Parents must precede their children, as in any export.\n"
     "\n"
     "The whole file is one transaction: on any error nothing is stored, and the\n"
     "message names FILE:LINE of the record that failed. Standard input is read\n"
     "into memory first. On a terminal a progress line appears after a second.\n"
     "\n"
     "Options:\n"
     "  --batch N    commit every N records instead (for files too large for one\n"
     "               transaction); on error, the batches before it stay committed\n"
     "               and the message says how many records that was\n"
     "  -q, --quiet  no progress line and no summary\n"
     "\n"
     "Prints 'imported N entries in X s (Y entries/s)' on stderr unless -q.\n"
     "\n"
     "Examples:\n"
     "  idcache db -d /tmp/store import people.ldif\n"
     "  slapcat -n1 | idcache db -d /tmp/store import -\n"},
    {"export", "idcache db -d DIR export [-b BASE] [FILE|-]",
     "Write every entry (or the subtree at BASE) as LDIF to FILE or standard\n"
     "output, parents before children, so the output imports into an empty store\n"
     "and exports again byte for byte the same. FILE is written under a temporary\n"
     "name and renamed into place when complete.\n"
     "\n"
     "Options:\n"
     "  -b, --base BASE  export only the subtree at BASE\n"
     "\n"
     "Example:\n"
     "  idcache db -d /tmp/store export backup.ldif\n"},
    {"search",
     "idcache db -d DIR search [-b BASE] [-s base|one|sub] [-z LIMIT] [--explain]\n"
     "       [FILTER [ATTR...]]",
     "Search the store and print matching entries as LDIF, one blank line after\n"
     "each, as 'ldapsearch -LLL' does. FILTER is an RFC 4515 filter (default\n"
     "'(objectClass=*)'; outer parentheses are optional). ATTRs select the\n"
     "attributes printed: none means all, '*' all user attributes, '1.1' none.\n"
     "\n"
     "Options:\n"
     "  -b, --base BASE      where to start (default: the root, above every\n"
     "                       naming context)\n"
     "  -s, --scope SCOPE    base, one or sub (default sub)\n"
     "  -z, --sizelimit N    stop after N entries; then 'size limit exceeded'\n"
     "                       is printed on stderr, and the exit status stays 0\n"
     "  --explain            print how the search would run (the indexes used\n"
     "                       and the candidate estimate) instead of running it\n"
     "\n"
     "Examples:\n"
     "  idcache db -d /tmp/store search '(uid=alice)' cn uidNumber\n"
     "  idcache db -d /tmp/store search -s one -b ou=people,dc=example,dc=org\n"
     "  idcache db -d /tmp/store search '(&(uidNumber>=1000)(uidNumber<=1999))'\n"
     "  idcache db -d /tmp/store search '(ou:dn:=people)' 1.1\n"},
    {"modify", "idcache db -d DIR modify [-q] [--batch N] FILE.ldif|-",
     "Apply LDIF change records (changetype: add, delete, modify, modrdn) from\n"
     "FILE or standard input, all in one transaction, through the ordinary write\n"
     "path rather than import's bulk one. Records without a changetype are added,\n"
     "as with 'ldapmodify -a'. Options and errors as for import.\n"
     "\n"
     "Example:\n"
     "  printf 'dn: uid=alice,ou=people,dc=example,dc=org\\nchangetype: modify\\n"
     "replace: loginShell\\nloginShell: /bin/zsh\\n' | idcache db -d /tmp/store modify -\n"},
    {"delete", "idcache db -d DIR delete [-r] DN...",
     "Delete the entries named, all in one transaction. An entry with children is\n"
     "refused unless -r is given.\n"
     "\n"
     "Options:\n"
     "  -r, --recursive  delete each DN's whole subtree\n"
     "\n"
     "Example:\n"
     "  idcache db -d /tmp/store delete -r ou=old,dc=example,dc=org\n"},
    {"index", "idcache db -d DIR index list | add ATTR | remove ATTR",
     "list prints the indexed attributes, one per line. add builds an equality and\n"
     "presence index for ATTR from every entry; remove drops one. Searches work\n"
     "without an index, only slower (see 'search --explain').\n"
     "\n"
     "Example:\n"
     "  idcache db -d /tmp/store index add mail\n"},
    {"check", "idcache db -d DIR check",
     "Verify every invariant of the store: indexes against entries, DN table\n"
     "against entry table, parents, metadata. Prints each fault found and 'N\n"
     "faults' (exit status 1), or 'store is consistent (N entries)'. It reads\n"
     "the store in a child process: a damaged file prints 'damaged: REASON'\n"
     "(exit status 1) instead of crashing the check.\n"},
    {"stats", "idcache db -d DIR stats",
     "Print the number of entries, the next entry id, the map size, the bytes in\n"
     "use, the file size, the format version and the indexes.\n"},
};

static const struct db_help_text *find_text(const char *name)
{
	for (size_t i = 0; i < IDC_ARRAY_SIZE(texts); i++) {
		const char *n = texts[i].name;
		if ((!n && !name) || (n && name && strcmp(n, name) == 0))
			return &texts[i];
	}
	return NULL;
}

const char *db_synopsis(const char *name)
{
	const struct db_help_text *t = find_text(name);
	return t ? t->synopsis : NULL;
}

bool db_help(FILE *out, const char *name)
{
	const struct db_help_text *t = find_text(name);
	if (!t)
		return false;
	fprintf(out, "Usage: %s\n\n%s\n%s\nSee idcache(1).\n", t->synopsis, t->body, exit_status);
	return true;
}
