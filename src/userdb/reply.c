/*
 * reply: the JSON of the replies — user and group records as systemd's
 * record specifications define their "regular" section, memberships,
 * GetInfo, errors — built with json-c and framed with their NUL.
 *
 * JSON text must be UTF-8 and json-c writes what it is given: a field that
 * is not valid UTF-8 (a gecos in Latin-1, say) is left out of the record
 * rather than making the whole reply unreadable; a name that is not makes
 * the record impossible (-EILSEQ).
 */
#include <errno.h>
#include <json-c/json.h>
#include <string.h>

#include "userdb/userdb.h"

struct udb_reply {
	json_object *params;
};

/* Whether s is well-formed UTF-8 (shortest forms, no surrogates, at most
 * U+10FFFF) without control characters below 0x20 but tab. */
static bool utf8_text(const char *s)
{
	const unsigned char *p = (const unsigned char *)s;
	while (*p) {
		unsigned c = *p;
		unsigned n = c < 0x80   ? 0
			     : c < 0xc2 ? 4
			     : c < 0xe0 ? 1
			     : c < 0xf0 ? 2
			     : c < 0xf5 ? 3
					: 4;
		if (n == 4 || (c < 0x20 && c != '\t'))
			return false;
		unsigned cp = n == 0 ? c : c & (0x3f >> n);
		for (unsigned i = 1; i <= n; i++) {
			if ((p[i] & 0xc0) != 0x80)
				return false;
			cp = cp << 6 | (p[i] & 0x3f);
		}
		if ((n == 2 && (cp < 0x800 || (cp >= 0xd800 && cp < 0xe000))) ||
		    (n == 3 && (cp < 0x10000 || cp > 0x10ffff)))
			return false;
		p += n + 1;
	}
	return true;
}

/* obj[key] = s, when s is non-empty valid text. 0 or -ENOMEM. */
static int add_text(json_object *obj, const char *key, const char *s)
{
	if (!s || !*s || !utf8_text(s))
		return 0;
	json_object *v = json_object_new_string(s);
	return v && json_object_object_add(obj, key, v) == 0 ? 0 : (json_object_put(v), -ENOMEM);
}

static int add_value(json_object *obj, const char *key, json_object *v)
{
	if (v && json_object_object_add(obj, key, v) == 0)
		return 0;
	json_object_put(v);
	return -ENOMEM;
}

/* obj[key] = the valid strings of v[0..n), when there are any. */
static int add_list(json_object *obj, const char *key, const char *const *v, size_t n)
{
	json_object *a = NULL;
	for (size_t i = 0; i < n; i++) {
		if (!v[i] || !*v[i] || !utf8_text(v[i]))
			continue;
		if (!a && !(a = json_object_new_array()))
			return -ENOMEM;
		json_object *s = json_object_new_string(v[i]);
		if (!s || json_object_array_add(a, s) < 0) {
			json_object_put(s);
			json_object_put(a);
			return -ENOMEM;
		}
	}
	return a ? add_value(obj, key, a) : 0;
}

const char *udb_disposition(uint32_t id)
{
	if (id == 0 || id == 65534)
		return "intrinsic";
	return id < 1000 ? "system" : "regular";
}

static int user_fields(json_object *rec, const struct udb_user *u)
{
	int rc = add_text(rec, "userName", u->name);
	rc = rc ? rc : add_value(rec, "uid", json_object_new_int64(u->uid));
	rc = rc ? rc : add_value(rec, "gid", json_object_new_int64(u->gid));
	rc = rc ? rc : add_text(rec, "realName", u->gecos);
	rc = rc ? rc : add_text(rec, "homeDirectory", u->dir);
	rc = rc ? rc : add_text(rec, "shell", u->shell);
	rc = rc ? rc : add_list(rec, "memberOf", u->member_of, u->nmember_of);
	rc = rc ? rc : add_list(rec, "sshAuthorizedKeys", u->keys, u->nkeys);
	rc = rc ? rc : add_text(rec, "service", u->service);
	return rc ? rc : add_text(rec, "disposition", udb_disposition(u->uid));
}

static int group_fields(json_object *rec, const struct udb_group *g)
{
	int rc = add_text(rec, "groupName", g->name);
	rc = rc ? rc : add_value(rec, "gid", json_object_new_int64(g->gid));
	rc = rc ? rc : add_list(rec, "members", g->members, g->nmembers);
	rc = rc ? rc : add_text(rec, "service", g->service);
	return rc ? rc : add_text(rec, "disposition", udb_disposition(g->gid));
}

static int reply_new(struct udb_reply **out)
{
	struct udb_reply *r = calloc(1, sizeof(*r));
	if (r && !(r->params = json_object_new_object())) {
		free(r);
		r = NULL;
	}
	*out = r;
	return r ? 0 : -ENOMEM;
}

void udb_reply_free(struct udb_reply *r)
{
	if (r)
		json_object_put(r->params);
	free(r);
}

/* {"record": rec, "incomplete": false} into a new reply (rec taken). */
static int record_reply(json_object *rec, struct udb_reply **out)
{
	int rc = reply_new(out);
	rc = rc ? (json_object_put(rec), rc) : add_value((*out)->params, "record", rec);
	rc = rc ? rc : add_value((*out)->params, "incomplete", json_object_new_boolean(0));
	if (rc < 0) {
		udb_reply_free(*out);
		*out = NULL;
	}
	return rc;
}

/* A name that JSON can carry: non-empty valid text. */
static bool name_ok(const char *name)
{
	return name && *name && utf8_text(name);
}

int udb_reply_user(const struct udb_user *u, struct udb_reply **out)
{
	*out = NULL;
	json_object *rec = name_ok(u->name) ? json_object_new_object() : NULL;
	int rc = !name_ok(u->name) ? -EILSEQ : rec ? user_fields(rec, u) : -ENOMEM;
	return rc ? (json_object_put(rec), rc) : record_reply(rec, out);
}

int udb_reply_group(const struct udb_group *g, struct udb_reply **out)
{
	*out = NULL;
	json_object *rec = name_ok(g->name) ? json_object_new_object() : NULL;
	int rc = !name_ok(g->name) ? -EILSEQ : rec ? group_fields(rec, g) : -ENOMEM;
	return rc ? (json_object_put(rec), rc) : record_reply(rec, out);
}

int udb_reply_membership(const char *user, const char *group, struct udb_reply **out)
{
	*out = NULL;
	if (!name_ok(user) || !name_ok(group))
		return -EILSEQ;
	int rc = reply_new(out);
	rc = rc ? rc : add_text((*out)->params, "userName", user);
	rc = rc ? rc : add_text((*out)->params, "groupName", group);
	if (rc < 0) {
		udb_reply_free(*out);
		*out = NULL;
	}
	return rc;
}

int udb_reply_info(const char *version, struct udb_reply **out)
{
	static const char *const ifaces[] = {UDB_VL_IFACE, UDB_IFACE};
	int rc = reply_new(out);
	rc = rc ? rc : add_text((*out)->params, "vendor", "idcache");
	rc = rc ? rc : add_text((*out)->params, "product", "idcached");
	rc = rc ? rc : add_text((*out)->params, "version", version);
	rc = rc ? rc : add_value((*out)->params, "url", json_object_new_string(""));
	rc = rc ? rc : add_list((*out)->params, "interfaces", ifaces, IDC_ARRAY_SIZE(ifaces));
	if (rc < 0) {
		udb_reply_free(*out);
		*out = NULL;
	}
	return rc;
}

/* Append obj's text and the NUL that ends a message. */
static int write_message(json_object *obj, struct idc_buf *out)
{
	size_t len = 0;
	const char *s = json_object_to_json_string_length(
	    obj, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &len);
	if (!s)
		return -ENOMEM;
	int rc = idc_buf_reserve(out, len + 1);
	rc = rc ? rc : idc_buf_append(out, s, len);
	return rc ? rc : idc_buf_append(out, "", 1);
}

int udb_reply_write(const struct udb_reply *r, bool continues, struct idc_buf *out)
{
	json_object *msg = json_object_new_object();
	int rc = msg ? add_value(msg, "parameters", json_object_get(r->params)) : -ENOMEM;
	if (rc == 0 && continues)
		rc = add_value(msg, "continues", json_object_new_boolean(1));
	rc = rc ? rc : write_message(msg, out);
	json_object_put(msg);
	return rc;
}

int udb_error_write(const struct udb_error *e, struct idc_buf *out)
{
	json_object *msg = json_object_new_object(), *params = json_object_new_object();
	int rc = msg && params ? add_text(msg, "error", e->name) : -ENOMEM;
	if (rc == 0 && e->key)
		rc = add_value(params, e->key, json_object_new_string(e->value));
	rc = rc ? rc : add_value(msg, "parameters", json_object_get(params));
	rc = rc ? rc : write_message(msg, out);
	json_object_put(params);
	json_object_put(msg);
	return rc;
}
