/*
 * call: decoding one Varlink method call of io.systemd.UserDatabase (or
 * org.varlink.service.GetInfo) with json-c, strictly: valid UTF-8, bounded
 * nesting, the whole message one JSON object. What a caller got wrong but
 * said in Varlink (unknown method, a bad parameter) is answered with an
 * error; what is not Varlink at all closes the connection.
 */
#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <string.h>

#include "userdb/userdb.h"

void udb_error_set(struct udb_error *e, const char *name, const char *key, const char *value)
{
	e->name = name;
	e->key = key;
	int n = snprintf(e->value, sizeof(e->value), "%s", key && value ? value : "");
	if (n >= (int)sizeof(e->value)) { /* cut: never inside a UTF-8 sequence */
		size_t end = sizeof(e->value) - 1;
		while (end > 0 && ((unsigned char)e->value[end] & 0xc0) == 0x80)
			end--;
		e->value[end] = '\0';
	}
}

/* Parse the whole of msg[0..len) as one JSON value; NULL if it is not. */
static json_object *parse_all(const char *msg, size_t len)
{
	if (len == 0 || len > UDB_MSG_MAX || memchr(msg, '\0', len))
		return NULL;
	json_tokener *tok = json_tokener_new_ex(UDB_JSON_DEPTH);
	if (!tok)
		return NULL;
	json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
	json_object *v = json_tokener_parse_ex(tok, msg, (int)len);
	bool whole = v && json_tokener_get_error(tok) == json_tokener_success &&
		     json_tokener_get_parse_end(tok) == len;
	json_tokener_free(tok);
	if (!whole) {
		json_object_put(v);
		return NULL;
	}
	return v;
}

/* The method's name to enum; 0 (and *err) when unknown. */
static enum udb_method method_of(const char *m, struct udb_error *err)
{
	static const struct {
		const char *name;
		enum udb_method method;
	} methods[] = {
	    {UDB_IFACE ".GetUserRecord", UDB_GET_USER},
	    {UDB_IFACE ".GetGroupRecord", UDB_GET_GROUP},
	    {UDB_IFACE ".GetMemberships", UDB_GET_MEMBERSHIPS},
	    {UDB_VL_IFACE ".GetInfo", UDB_GET_INFO},
	};
	for (size_t i = 0; i < IDC_ARRAY_SIZE(methods); i++)
		if (strcmp(m, methods[i].name) == 0)
			return methods[i].method;
	const char *dot = strrchr(m, '.');
	size_t iface = dot ? (size_t)(dot - m) : strlen(m);
	bool ours = (iface == strlen(UDB_IFACE) && strncmp(m, UDB_IFACE, iface) == 0) ||
		    (iface == strlen(UDB_VL_IFACE) && strncmp(m, UDB_VL_IFACE, iface) == 0);
	if (ours) {
		udb_error_set(err, UDB_ERR_NO_METHOD, "method", m);
	} else {
		char name[sizeof(err->value)];
		snprintf(name, sizeof(name), "%.*s",
			 (int)(iface < sizeof(name) ? iface : sizeof(name) - 1), m);
		udb_error_set(err, UDB_ERR_NO_IFACE, "interface", name);
	}
	return 0;
}

/* A string parameter into buf (cap bytes with the NUL); *bad when it
 * cannot be a name (too long, embedded NUL). false: not a string. */
static bool get_name(json_object *v, char *buf, size_t cap, bool *bad)
{
	if (!json_object_is_type(v, json_type_string))
		return false;
	const char *s = json_object_get_string(v);
	size_t n = (size_t)json_object_get_string_len(v);
	*bad = n == 0 || n >= cap || memchr(s, '\0', n) != NULL;
	if (!*bad)
		memcpy(buf, s, n + 1);
	return true;
}

static bool get_id(json_object *v, uint32_t *id)
{
	if (!json_object_is_type(v, json_type_int))
		return false;
	errno = 0;
	int64_t n = json_object_get_int64(v);
	/* (uint32_t)-1 is no id: the kernel's "unset" */
	if (errno || n < 0 || n >= (int64_t)UINT32_MAX)
		return false;
	*id = (uint32_t)n;
	return true;
}

/* Which parameters a method takes, and the name of its id parameter. */
static bool param_known(enum udb_method m, const char *key)
{
	if (m == UDB_GET_INFO)
		return false;
	if (strcmp(key, "service") == 0)
		return true;
	if (m == UDB_GET_USER)
		return strcmp(key, "uid") == 0 || strcmp(key, "userName") == 0;
	if (m == UDB_GET_GROUP)
		return strcmp(key, "gid") == 0 || strcmp(key, "groupName") == 0;
	return strcmp(key, "userName") == 0 || strcmp(key, "groupName") == 0;
}

/* One parameter (known to the method); false when of the wrong type. */
static bool set_param(struct udb_call *c, const char *key, json_object *v)
{
	if (json_object_is_type(v, json_type_null))
		return true;
	if (strcmp(key, "service") == 0) {
		bool bad;
		if (!get_name(v, c->service, sizeof(c->service), &bad))
			return false;
		c->has_service = !bad;
		return true;
	}
	if (strcmp(key, "uid") == 0 || strcmp(key, "gid") == 0)
		return (c->has_id = get_id(v, &c->id));
	if (strcmp(key, "userName") == 0)
		return (c->has_user = get_name(v, c->user, sizeof(c->user), &c->bad_user));
	return (c->has_group = get_name(v, c->group, sizeof(c->group), &c->bad_group));
}

static int parse_params(json_object *params, struct udb_call *c, struct udb_error *err)
{
	if (!params || json_object_is_type(params, json_type_null))
		return 0;
	if (!json_object_is_type(params, json_type_object)) {
		udb_error_set(err, UDB_ERR_BAD_PARAM, "parameter", "parameters");
		return 1;
	}
	json_object_object_foreach(params, key, v)
	{
		if (!param_known(c->method, key) || !set_param(c, key, v)) {
			udb_error_set(err, UDB_ERR_BAD_PARAM, "parameter", key);
			return 1;
		}
	}
	return 0;
}

/* An optional boolean flag of the call; false when present and not one. */
static bool get_flag(json_object *root, const char *key, bool *out)
{
	json_object *v;
	if (!json_object_object_get_ex(root, key, &v) || json_object_is_type(v, json_type_null))
		return true;
	if (!json_object_is_type(v, json_type_boolean))
		return false;
	*out = json_object_get_boolean(v);
	return true;
}

static int parse_root(json_object *root, struct udb_call *c, struct udb_error *err)
{
	json_object *m, *params = NULL;
	if (!json_object_is_type(root, json_type_object) ||
	    !json_object_object_get_ex(root, "method", &m) ||
	    !json_object_is_type(m, json_type_string))
		return -EBADMSG;
	bool upgrade = false;
	if (!get_flag(root, "more", &c->more) || !get_flag(root, "oneway", &c->oneway) ||
	    !get_flag(root, "upgrade", &upgrade))
		return -EBADMSG;
	c->method = method_of(json_object_get_string(m), err);
	if (!c->method)
		return 1;
	json_object_object_get_ex(root, "parameters", &params);
	return parse_params(params, c, err);
}

int udb_call_parse(const char *msg, size_t len, struct udb_call *call, struct udb_error *err)
{
	memset(call, 0, sizeof(*call));
	udb_error_set(err, NULL, NULL, NULL);
	json_object *root = parse_all(msg, len);
	if (!root)
		return -EBADMSG;
	int rc = parse_root(root, call, err);
	json_object_put(root);
	return rc;
}
