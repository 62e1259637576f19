/*
 * Internals shared by the files of the store module; nothing outside
 * src/store includes this.
 */
#ifndef IDC_STORE_INT_H
#define IDC_STORE_INT_H

#include "store.h"

/* ---- filter tree -------------------------------------------------------------
 * Built by store_filter_parse; read by filter.c (evaluation) and search.c
 * (the planner). All strings are owned by the tree (one arena). */
enum store_filter_type {
	SF_AND,     /* kids; empty "(&)" is absolute true */
	SF_OR,      /* kids; empty "(|)" is absolute false */
	SF_NOT,     /* kids[0] */
	SF_EQ,      /* attr = value */
	SF_APPROX,  /* attr ~= value: evaluated as equality */
	SF_GE,      /* attr >= value */
	SF_LE,      /* attr <= value */
	SF_PRESENT, /* attr =* */
	SF_SUBSTR,  /* attr = initial*any*...*final */
	SF_EXT,     /* [attr][:dn][:rule]:=value */
};

struct store_filter {
	enum store_filter_type type;
	struct store_filter **kids;
	size_t nkids;

	/* attribute assertions (all but AND/OR/NOT) */
	char *attr;           /* canonical name; NULL for ":rule:=" without attr */
	size_t attr_len;
	enum store_rule rule; /* the attribute's rule, or the extensible one */
	bool has_rule;        /* SF_EXT named a rule */
	bool dn_attrs;        /* SF_EXT with ":dn" */
	struct store_val raw; /* assertion value, escapes undone */
	struct store_val norm; /* raw normalized under rule */
	bool valid;           /* false: raw is not of the rule's syntax, so the
			       * assertion is Undefined for every entry */

	/* SF_SUBSTR: each part normalized under the attribute's rule (with
	 * caseIgnore/caseExact space handling applied per part) */
	struct store_val initial; /* len 0 and ptr NULL: none */
	struct store_val *any;
	size_t nany;
	struct store_val final;
};

/* Three-valued result of evaluating a filter (RFC 4511 4.5.1.7). */
enum { SF_FALSE = 0, SF_TRUE = 1, SF_UNDEF = 2 };
int store_filter_eval(const struct store_filter *f, const struct store_entry *e,
		      struct idc_buf *scratch);

#endif
