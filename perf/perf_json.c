/*
 * perf: result files. JSON is the record (everything, for compare and
 * plot); CSV has one line per row for spreadsheets. The reader is a small
 * recursive-descent JSON parser that fills perf_results back from what
 * perf_json_write writes, ignoring keys it does not know.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "perf.h"

/* ==== writing =============================================================== */

void perf_json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c < 0x20)
			fprintf(f, "\\u%04x", c);
		else
			fputc(c, f);
	}
	fputc('"', f);
}

/* A number JSON accepts: no NaN or infinity. */
static void json_num(FILE *f, double v)
{
	fprintf(f, isfinite(v) ? "%.6g" : "null", v);
}

static void write_row(FILE *f, const struct perf_row *w)
{
	fputs("    {\"test\": ", f);
	perf_json_str(f, w->test);
	fputs(", \"engine\": ", f);
	perf_json_str(f, w->engine);
	fprintf(f, ", \"users\": %llu, \"threads\": %u, \"status\": \"%s\", ",
		(unsigned long long)w->users, w->threads, perf_status_name(w->status));
	fputs("\"why\": ", f);
	perf_json_str(f, w->why);
	fputs(", \"unit\": ", f);
	perf_json_str(f, w->unit);
	fputs(", \"cache\": ", f);
	perf_json_str(f, w->cache);
	if (w->status == PERF_OK) {
		fputs(", \"median\": ", f);
		json_num(f, w->st.median);
		fputs(", \"min\": ", f);
		json_num(f, w->st.min);
		fputs(", \"max\": ", f);
		json_num(f, w->st.max);
		fputs(", \"q1\": ", f);
		json_num(f, w->st.q1);
		fputs(", \"q3\": ", f);
		json_num(f, w->st.q3);
		if (perf_us_per_lookup(w) > 0) {
			fputs(", \"us_per_lookup\": ", f);
			json_num(f, perf_us_per_lookup(w));
		}
		fprintf(f, ", \"outliers\": %u, \"count\": %llu, \"samples\": [", w->st.outliers,
			(unsigned long long)w->count);
		for (unsigned i = 0; i < w->nsamples; i++) {
			fputs(i ? ", " : "", f);
			json_num(f, w->samples[i]);
		}
		fputc(']', f);
	}
	fputc('}', f);
}

static void write_engines(FILE *f, const struct perf_results *r)
{
	fputs("  \"engines\": [\n", f);
	for (size_t i = 0; i < r->nengines; i++) {
		const struct perf_engine_info *e = &r->engines[i];
		fputs("    {\"name\": ", f);
		perf_json_str(f, e->name);
		fputs(", \"status\": ", f);
		char st[300];
		snprintf(st, sizeof(st), "%s%s",
			 e->available ? "available" : "unavailable: ", e->available ? "" : e->why);
		perf_json_str(f, st);
		fputs(", \"durability\": ", f);
		perf_json_str(f, e->durability);
		fputs(", \"access\": ", f);
		perf_json_str(f, e->access);
		fprintf(f, "}%s\n", i + 1 < r->nengines ? "," : "");
	}
	fputs("  ],\n", f);
}

int perf_json_write(const struct perf_results *r, const char *path, struct idc_diag *d)
{
	FILE *f = fopen(path, "w");
	if (!f)
		return idc_diag_set(d, -errno, "%s: %s", path, strerror(errno));
	fprintf(f, "{\n  \"format\": \"idcache-perf/1\",\n  \"interrupted\": %s,\n",
		r->interrupted ? "true" : "false");
	fputs("  \"indexes\": ", f);
	perf_json_str(f, r->indexes);
	fputs(",\n  \"machine\": {", f);
	for (size_t i = 0; i < r->nfacts; i++) {
		fputs(i ? ",\n    " : "\n    ", f);
		perf_json_str(f, r->facts[i].key);
		fputs(": ", f);
		perf_json_str(f, r->facts[i].val);
	}
	fputs("\n  },\n", f);
	write_engines(f, r);
	fputs("  \"sizes\": [\n", f);
	for (size_t i = 0; i < r->nsizes; i++) {
		const struct perf_size *s = &r->sizes[i];
		fputs("    {\"engine\": ", f);
		perf_json_str(f, s->engine);
		fprintf(f,
			", \"users\": %llu, \"entries\": %llu, \"disk_bytes\": %lld, "
			"\"ldif_bytes\": %llu}%s\n",
			(unsigned long long)s->users, (unsigned long long)s->entries,
			(long long)s->disk_bytes, (unsigned long long)s->ldif_bytes,
			i + 1 < r->nsizes ? "," : "");
	}
	fputs("  ],\n  \"rows\": [\n", f);
	for (size_t i = 0; i < r->nrows; i++) {
		write_row(f, &r->rows[i]);
		fputs(i + 1 < r->nrows ? ",\n" : "\n", f);
	}
	fputs("  ]\n}\n", f);
	if (fclose(f) != 0)
		return idc_diag_set(d, -EIO, "%s: %s", path, strerror(errno));
	return 0;
}

/* CSV field: quoted when it holds a comma, quote or newline. */
static void csv_field(FILE *f, const char *s)
{
	if (!strpbrk(s, ",\"\n")) {
		fputs(s, f);
		return;
	}
	fputc('"', f);
	for (; *s; s++) {
		if (*s == '"')
			fputc('"', f);
		fputc(*s, f);
	}
	fputc('"', f);
}

int perf_csv_write(const struct perf_results *r, const char *path, struct idc_diag *d)
{
	FILE *f = fopen(path, "w");
	if (!f)
		return idc_diag_set(d, -errno, "%s: %s", path, strerror(errno));
	fputs("test,engine,users,threads,status,unit,median,min,max,q1,q3,samples,outliers,cache,"
	      "why\n",
	      f);
	for (size_t i = 0; i < r->nrows; i++) {
		const struct perf_row *w = &r->rows[i];
		fprintf(f, "%s,%s,%llu,%u,%s,%s,", w->test, w->engine, (unsigned long long)w->users,
			w->threads, perf_status_name(w->status), w->unit);
		if (w->status == PERF_OK)
			fprintf(f, "%.6g,%.6g,%.6g,%.6g,%.6g,%u,%u,", w->st.median, w->st.min,
				w->st.max, w->st.q1, w->st.q3, w->st.n, w->st.outliers);
		else
			fputs(",,,,,,,", f);
		csv_field(f, w->cache);
		fputc(',', f);
		csv_field(f, w->why);
		fputc('\n', f);
	}
	if (fclose(f) != 0)
		return idc_diag_set(d, -EIO, "%s: %s", path, strerror(errno));
	return 0;
}

/* ==== reading ====================================================================== */

enum jtype { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ };

struct jval {
	enum jtype type;
	double num;
	char *str;          /* J_STR (owned) */
	struct jval *items; /* J_ARR, J_OBJ: values */
	char **keys;        /* J_OBJ: one per item */
	size_t n;
};

struct jparse {
	const char *p, *end;
	int depth;
};

static void jfree(struct jval *v)
{
	for (size_t i = 0; i < v->n; i++) {
		jfree(&v->items[i]);
		if (v->keys)
			free(v->keys[i]);
	}
	free(v->items);
	free(v->keys);
	free(v->str);
}

static void skip_ws(struct jparse *j)
{
	while (j->p < j->end && isspace((unsigned char)*j->p))
		j->p++;
}

static int parse_value(struct jparse *j, struct jval *v);

/* A string; \uXXXX kept to one byte when ASCII, else '?' (our writer only
 * escapes control characters). */
static int parse_str(struct jparse *j, char **out)
{
	size_t cap = 64, n = 0;
	char *s = malloc(cap);
	if (!s)
		return -ENOMEM;
	for (j->p++; j->p < j->end && *j->p != '"'; j->p++) {
		char c = *j->p;
		if (c == '\\' && j->p + 1 < j->end) {
			c = *++j->p;
			if (c == 'n')
				c = '\n';
			else if (c == 't')
				c = '\t';
			else if (c == 'u' && j->end - j->p > 4) {
				unsigned u = (unsigned)strtoul(
				    (char[5]){j->p[1], j->p[2], j->p[3], j->p[4], 0}, NULL, 16);
				c = u < 0x80 ? (char)u : '?';
				j->p += 4;
			}
		}
		if (n + 2 > cap) {
			char *t = realloc(s, cap *= 2);
			if (!t) {
				free(s);
				return -ENOMEM;
			}
			s = t;
		}
		s[n++] = c;
	}
	s[n] = '\0';
	if (j->p >= j->end) {
		free(s);
		return -EINVAL;
	}
	j->p++;
	*out = s;
	return 0;
}

static int push(struct jval *v, size_t *cap)
{
	if (v->n < *cap)
		return 0;
	*cap = *cap ? *cap * 2 : 8;
	struct jval *it = realloc(v->items, *cap * sizeof(*it));
	if (!it)
		return -ENOMEM;
	v->items = it;
	if (v->type == J_OBJ) {
		char **k = realloc(v->keys, *cap * sizeof(*k));
		if (!k)
			return -ENOMEM;
		v->keys = k;
	}
	return 0;
}

/* Array or object body after the opening bracket. */
static int parse_list(struct jparse *j, struct jval *v, char close)
{
	size_t cap = 0;
	j->p++;
	skip_ws(j);
	if (j->p < j->end && *j->p == close) {
		j->p++;
		return 0;
	}
	for (;;) {
		skip_ws(j);
		int rc = push(v, &cap);
		char *key = NULL;
		if (rc == 0 && close == '}') {
			rc = j->p < j->end && *j->p == '"' ? parse_str(j, &key) : -EINVAL;
			skip_ws(j);
			rc = rc < 0 ? rc : (j->p < j->end && *j->p == ':') ? 0 : -EINVAL;
			j->p++;
		}
		if (close == '}')
			v->keys[v->n] = key;
		v->items[v->n] = (struct jval){0};
		rc = rc < 0 ? rc : parse_value(j, &v->items[v->n]);
		v->n++;
		if (rc < 0)
			return rc;
		skip_ws(j);
		if (j->p < j->end && *j->p == ',') {
			j->p++;
			continue;
		}
		if (j->p < j->end && *j->p == close) {
			j->p++;
			return 0;
		}
		return -EINVAL;
	}
}

static int parse_value(struct jparse *j, struct jval *v)
{
	skip_ws(j);
	if (j->p >= j->end || ++j->depth > 32)
		return -EINVAL;
	int rc = 0;
	char c = *j->p;
	if (c == '{' || c == '[') {
		v->type = c == '{' ? J_OBJ : J_ARR;
		rc = parse_list(j, v, c == '{' ? '}' : ']');
	} else if (c == '"') {
		v->type = J_STR;
		rc = parse_str(j, &v->str);
	} else if (strncmp(j->p, "true", 4) == 0 || strncmp(j->p, "false", 5) == 0) {
		v->type = J_BOOL;
		v->num = c == 't';
		j->p += c == 't' ? 4 : 5;
	} else if (strncmp(j->p, "null", 4) == 0) {
		v->type = J_NULL;
		v->num = NAN;
		j->p += 4;
	} else {
		char *e;
		v->type = J_NUM;
		v->num = strtod(j->p, &e);
		rc = e == j->p ? -EINVAL : 0;
		j->p = e;
	}
	j->depth--;
	return rc;
}

static const struct jval *jget(const struct jval *o, const char *key)
{
	for (size_t i = 0; o && o->type == J_OBJ && i < o->n; i++)
		if (strcmp(o->keys[i], key) == 0)
			return &o->items[i];
	return NULL;
}

static const char *jstr(const struct jval *o, const char *key)
{
	const struct jval *v = jget(o, key);
	return v && v->type == J_STR ? v->str : "";
}

static double jnum(const struct jval *o, const char *key)
{
	const struct jval *v = jget(o, key);
	return v && v->type == J_NUM ? v->num : NAN;
}

static int read_row(const struct jval *o, struct perf_results *r)
{
	struct perf_row *w = perf_row_add(r);
	if (!w)
		return -ENOMEM;
	snprintf(w->test, sizeof(w->test), "%s", jstr(o, "test"));
	snprintf(w->engine, sizeof(w->engine), "%s", jstr(o, "engine"));
	snprintf(w->why, sizeof(w->why), "%s", jstr(o, "why"));
	snprintf(w->unit, sizeof(w->unit), "%s", jstr(o, "unit"));
	snprintf(w->cache, sizeof(w->cache), "%s", jstr(o, "cache"));
	w->users = (uint64_t)jnum(o, "users");
	w->threads = (unsigned)jnum(o, "threads");
	if (perf_status_parse(jstr(o, "status"), &w->status) < 0)
		w->status = PERF_FAILED;
	w->st.median = jnum(o, "median");
	w->st.min = jnum(o, "min");
	w->st.max = jnum(o, "max");
	w->st.q1 = jnum(o, "q1");
	w->st.q3 = jnum(o, "q3");
	const struct jval *s = jget(o, "samples");
	for (size_t i = 0; s && s->type == J_ARR && i < s->n && i < PERF_MAX_SAMPLES; i++)
		w->samples[w->nsamples++] = s->items[i].num;
	w->st.n = w->nsamples;
	w->st.outliers = isfinite(jnum(o, "outliers")) ? (unsigned)jnum(o, "outliers") : 0;
	return 0;
}

static int fill(const struct jval *root, struct perf_results *r)
{
	const struct jval *m = jget(root, "machine"), *e = jget(root, "engines");
	const struct jval *rows = jget(root, "rows");
	if (!rows || rows->type != J_ARR || strcmp(jstr(root, "format"), "idcache-perf/1") != 0)
		return -EINVAL;
	const struct jval *intr = jget(root, "interrupted");
	r->interrupted = intr && intr->num != 0;
	snprintf(r->indexes, sizeof(r->indexes), "%s", jstr(root, "indexes"));
	for (size_t i = 0; m && m->type == J_OBJ && i < m->n; i++)
		if (m->items[i].type == J_STR)
			perf_fact_set(r, m->keys[i], "%s", m->items[i].str);
	for (size_t i = 0; e && e->type == J_ARR && i < e->n && r->nengines < PERF_MAX_ENGINES;
	     i++) {
		struct perf_engine_info *info = &r->engines[r->nengines++];
		const char *st = jstr(&e->items[i], "status");
		snprintf(info->name, sizeof(info->name), "%s", jstr(&e->items[i], "name"));
		info->available = strcmp(st, "available") == 0;
		snprintf(info->why, sizeof(info->why), "%s",
			 strncmp(st, "unavailable: ", 13) == 0 ? st + 13 : st);
		snprintf(info->durability, sizeof(info->durability), "%s",
			 jstr(&e->items[i], "durability"));
		snprintf(info->access, sizeof(info->access), "%s", jstr(&e->items[i], "access"));
	}
	for (size_t i = 0; i < rows->n; i++)
		if (read_row(&rows->items[i], r) < 0)
			return -ENOMEM;
	return 0;
}

int perf_json_read(const char *path, struct perf_results *r, struct idc_diag *d)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return idc_diag_set(d, -errno, "%s: %s", path, strerror(errno));
	struct idc_buf b = IDC_BUF_INIT;
	char chunk[65536];
	size_t n;
	int rc = 0;
	while (rc == 0 && (n = fread(chunk, 1, sizeof(chunk), f)) > 0)
		rc = idc_buf_append(&b, chunk, n);
	fclose(f);
	struct jparse j = {b.data, b.data + b.len, 0};
	struct jval root = {0};
	rc = rc < 0 ? rc : b.len ? parse_value(&j, &root) : -EINVAL;
	if (rc == 0 && fill(&root, r) < 0)
		rc = -EINVAL;
	jfree(&root);
	idc_buf_free(&b);
	return rc < 0 ? idc_diag_set(d, rc, "%s: not an idcache perf result file (%s)", path,
				     idc_strerror(rc))
		      : 0;
}
