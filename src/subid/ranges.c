/*
 * ranges: a set of subordinate id ranges searched by the id they hold
 * (subid.h "a set of ranges"). A treap keyed by (start, last, uid): each
 * node's priority is random, so the tree's depth stays O(log n) whatever
 * order the ranges come in (a directory chooses them), and each node
 * keeps the largest last id of its subtree, so a search skips every
 * subtree that ends before the id.
 */
#include <errno.h>
#include <stdlib.h>

#include "subid/subid.h"

struct node {
	uint32_t start, last, uid;
	uint32_t refs;     /* times added */
	uint32_t prio;     /* heap order: a parent's is at least its children's */
	uint32_t max_last; /* the largest last in this subtree */
	struct node *kid[2];
};

struct subid_set {
	struct node *root;
	size_t n;
	uint64_t rng; /* xorshift state for the priorities */
};

struct subid_set *subid_set_new(void)
{
	struct subid_set *s = calloc(1, sizeof(*s));
	if (s)
		s->rng = 0x9e3779b97f4a7c15ull ^ (uint64_t)(uintptr_t)s;
	return s;
}

static void free_tree(struct node *t)
{
	while (t) { /* the right spine iteratively, the left recursively: depth O(log n) */
		free_tree(t->kid[0]);
		struct node *r = t->kid[1];
		free(t);
		t = r;
	}
}

void subid_set_free(struct subid_set *s)
{
	if (!s)
		return;
	free_tree(s->root);
	free(s);
}

size_t subid_set_size(const struct subid_set *s)
{
	return s ? s->n : 0;
}

static uint32_t next_prio(struct subid_set *s)
{
	uint64_t x = s->rng;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	s->rng = x;
	return (uint32_t)(x >> 32);
}

/* <0, 0, >0 as (start, last, uid) orders a against b. */
static int cmp(const struct node *a, uint32_t start, uint32_t last, uint32_t uid)
{
	if (a->start != start)
		return a->start < start ? -1 : 1;
	if (a->last != last)
		return a->last < last ? -1 : 1;
	if (a->uid != uid)
		return a->uid < uid ? -1 : 1;
	return 0;
}

static void fix(struct node *t)
{
	t->max_last = t->last;
	for (int k = 0; k < 2; k++)
		if (t->kid[k] && t->kid[k]->max_last > t->max_last)
			t->max_last = t->kid[k]->max_last;
}

/* Lift t's child on side k above it; the new root of the subtree. */
static struct node *rotate(struct node *t, int k)
{
	struct node *c = t->kid[k];
	t->kid[k] = c->kid[!k];
	c->kid[!k] = t;
	fix(t);
	fix(c);
	return c;
}

static struct node *insert(struct node *t, struct node *n)
{
	if (!t)
		return n;
	int k = cmp(n, t->start, t->last, t->uid) > 0;
	t->kid[k] = insert(t->kid[k], n);
	if (t->kid[k]->prio > t->prio)
		return rotate(t, k);
	fix(t);
	return t;
}

static struct node *find(struct node *t, uint32_t start, uint32_t last, uint32_t uid)
{
	while (t) {
		int c = cmp(t, start, last, uid);
		if (c == 0)
			return t;
		t = t->kid[c < 0];
	}
	return NULL;
}

int subid_set_add(struct subid_set *s, uint32_t start, uint32_t count, uint32_t uid)
{
	uint32_t last = start + count - 1;
	struct node *t = find(s->root, start, last, uid);
	if (t) {
		t->refs++;
		return 0;
	}
	struct node *n = calloc(1, sizeof(*n));
	if (!n)
		return -ENOMEM;
	*n = (struct node){start, last, uid, 1, next_prio(s), last, {NULL, NULL}};
	s->root = insert(s->root, n);
	s->n++;
	return 0;
}

/* t's subtree without the node keyed (start, last, uid), which it holds:
 * the node is rotated down until it has one child, then unlinked. */
static struct node *erase(struct node *t, uint32_t start, uint32_t last, uint32_t uid)
{
	int c = cmp(t, start, last, uid);
	if (c != 0) {
		int k = c < 0;
		t->kid[k] = erase(t->kid[k], start, last, uid);
		fix(t);
		return t;
	}
	if (!t->kid[0] || !t->kid[1]) {
		struct node *only = t->kid[0] ? t->kid[0] : t->kid[1];
		free(t);
		return only;
	}
	int k = t->kid[1]->prio > t->kid[0]->prio; /* the higher child goes up */
	struct node *top = rotate(t, k);
	top->kid[!k] = erase(t, start, last, uid);
	fix(top);
	return top;
}

bool subid_set_del(struct subid_set *s, uint32_t start, uint32_t count, uint32_t uid)
{
	uint32_t last = start + count - 1;
	struct node *t = find(s->root, start, last, uid);
	if (!t)
		return false;
	if (--t->refs == 0) {
		s->root = erase(s->root, start, last, uid);
		s->n--;
	}
	return true;
}

static int walk(const struct node *t, uint32_t id, subid_set_cb cb, void *arg)
{
	while (t && t->max_last >= id) {
		int rc = walk(t->kid[0], id, cb, arg);
		if (rc)
			return rc;
		if (t->start > id) /* every start on the right is larger still */
			return 0;
		if (t->last >= id && (rc = cb(t->uid, arg)) != 0)
			return rc;
		t = t->kid[1];
	}
	return 0;
}

int subid_set_find(const struct subid_set *s, uint32_t id, subid_set_cb cb, void *arg)
{
	return s ? walk(s->root, id, cb, arg) : 0;
}
