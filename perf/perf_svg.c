/*
 * perf: the plot and the HTML page, written by hand (no library): an SVG
 * with one panel per test, users on a log x axis, the median rate on a log
 * y axis, one line per engine at the lowest thread count; and one HTML
 * page holding the facts, the table (as the terminal shows it) and the
 * SVG inline, so it is self-contained.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "perf.h"

#define PANEL_W 440
#define PANEL_H 280
#define MARGIN  56
#define COLS    2

static const char *const palette[] = {"#1b7837", "#5aae61", "#c51b7d", "#e9a3c9",
				      "#2166ac", "#b35806", "#542788", "#999999",
				      "#d6604d", "#35978f", "#8c510a", "#4d4d4d"};

#define LEGEND_PER_ROW 5
#define LEGEND_ROW_H   18

void perf_xml_text(FILE *f, const char *s)
{
	for (; *s; s++) {
		switch (*s) {
		case '&':
			fputs("&amp;", f);
			break;
		case '<':
			fputs("&lt;", f);
			break;
		case '>':
			fputs("&gt;", f);
			break;
		case '"':
			fputs("&quot;", f);
			break;
		default:
			fputc(*s, f);
		}
	}
}

/* Tests that have at least one figure, in the run's test order. */
static size_t plotted_tests(const struct perf_results *r, const char **out)
{
	size_t n = 0;
	for (size_t t = 0; t < perf_ntests; t++)
		for (size_t i = 0; i < r->nrows; i++)
			if (r->rows[i].status == PERF_OK &&
			    strcmp(r->rows[i].test, perf_tests[t].name) == 0) {
				out[n++] = perf_tests[t].name;
				break;
			}
	return n;
}

static unsigned min_threads(const struct perf_results *r, const char *test)
{
	unsigned m = ~0u;
	for (size_t i = 0; i < r->nrows; i++)
		if (strcmp(r->rows[i].test, test) == 0 && r->rows[i].threads < m)
			m = r->rows[i].threads;
	return m;
}

struct axes {
	double x0, x1, y0, y1; /* log10 ranges */
	int px, py;            /* panel origin */
};

static double sx(const struct axes *a, double users)
{
	double span = a->x1 - a->x0 > 0 ? a->x1 - a->x0 : 1;
	return a->px + MARGIN + (log10(users) - a->x0) / span * (PANEL_W - MARGIN - 16);
}

static double sy(const struct axes *a, double v)
{
	double span = a->y1 - a->y0 > 0 ? a->y1 - a->y0 : 1;
	return a->py + PANEL_H - 40 - (log10(v) - a->y0) / span * (PANEL_H - 40 - 30);
}

static void find_range(const struct perf_results *r, const char *test, unsigned th, struct axes *a)
{
	a->x0 = a->y0 = 1e300;
	a->x1 = a->y1 = -1e300;
	for (size_t i = 0; i < r->nrows; i++) {
		const struct perf_row *w = &r->rows[i];
		if (strcmp(w->test, test) || w->threads != th || w->status != PERF_OK ||
		    !(w->st.median > 0) || w->users == 0)
			continue;
		a->x0 = fmin(a->x0, floor(log10((double)w->users)));
		a->x1 = fmax(a->x1, ceil(log10((double)w->users)));
		a->y0 = fmin(a->y0, floor(log10(w->st.median)));
		a->y1 = fmax(a->y1, ceil(log10(w->st.median)));
	}
	if (a->x1 <= a->x0)
		a->x1 = a->x0 + 1;
	if (a->y1 <= a->y0)
		a->y1 = a->y0 + 1;
}

static void panel_frame(FILE *f, const struct axes *a, const char *test, const char *unit,
			unsigned th)
{
	fprintf(f,
		"<g class=\"panel\"><rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" "
		"fill=\"#ffffff\" stroke=\"#cccccc\"/>\n",
		a->px, a->py, PANEL_W - 8, PANEL_H - 8);
	fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"14\" font-weight=\"bold\">", a->px + 10,
		a->py + 18);
	perf_xml_text(f, test);
	fprintf(f, " (%s", unit);
	if (th)
		fprintf(f, ", %u thread%s", th, th > 1 ? "s" : "");
	fputs(")</text>\n", f);
	for (double e = a->x0; e <= a->x1 + 1e-9; e++) {
		char num[32];
		double x = sx(a, pow(10, e));
		fprintf(f,
			"<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#eeeeee\"/>"
			"<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" "
			"text-anchor=\"middle\">%s</text>\n",
			x, sy(a, pow(10, a->y0)), x, sy(a, pow(10, a->y1)), x,
			sy(a, pow(10, a->y0)) + 14, perf_fmt_num(pow(10, e), num, sizeof(num)));
	}
	for (double e = a->y0; e <= a->y1 + 1e-9; e++) {
		char num[32];
		double y = sy(a, pow(10, e));
		fprintf(
		    f,
		    "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#eeeeee\"/>"
		    "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" text-anchor=\"end\">%s</text>\n",
		    sx(a, pow(10, a->x0)), y, sx(a, pow(10, a->x1)), y, sx(a, pow(10, a->x0)) - 4,
		    y + 3, perf_fmt_num(pow(10, e), num, sizeof(num)));
	}
	fprintf(f,
		"<text x=\"%.1f\" y=\"%d\" font-size=\"10\" text-anchor=\"middle\">users "
		"(log scale)</text>\n",
		a->px + MARGIN + (PANEL_W - MARGIN) / 2.0, a->py + PANEL_H - 12);
}

static void panel_lines(FILE *f, const struct perf_results *r, const struct axes *a,
			const char *test, unsigned th)
{
	for (size_t e = 0; e < r->nengines; e++) {
		const char *col = palette[e % IDC_ARRAY_SIZE(palette)];
		bool open = false;
		for (size_t i = 0; i < r->nrows; i++) {
			const struct perf_row *w = &r->rows[i];
			if (strcmp(w->test, test) || strcmp(w->engine, r->engines[e].name) ||
			    w->threads != th || w->status != PERF_OK || !(w->st.median > 0))
				continue;
			if (!open)
				fprintf(f,
					"<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" "
					"points=\"",
					col);
			fprintf(f, "%s%.1f,%.1f", open ? " " : "", sx(a, (double)w->users),
				sy(a, w->st.median));
			open = true;
		}
		if (open)
			fputs("\"/>\n", f);
		for (size_t i = 0; i < r->nrows; i++) {
			const struct perf_row *w = &r->rows[i];
			if (strcmp(w->test, test) || strcmp(w->engine, r->engines[e].name) ||
			    w->threads != th || w->status != PERF_OK || !(w->st.median > 0))
				continue;
			fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\"><title>",
				sx(a, (double)w->users), sy(a, w->st.median), col);
			char num[48];
			perf_xml_text(f, w->engine);
			fprintf(f, ": %s %s</title></circle>\n",
				perf_fmt_num(w->st.median, num, sizeof(num)), w->unit);
		}
	}
}

void perf_svg_write(FILE *f, const struct perf_results *r, bool standalone)
{
	const char *tests[32];
	size_t nt = plotted_tests(r, tests);
	size_t rows = (nt + COLS - 1) / COLS;
	int legend = (int)((r->nengines + LEGEND_PER_ROW - 1) / LEGEND_PER_ROW);
	int extra = legend > 1 ? (legend - 1) * LEGEND_ROW_H : 0;
	int width = COLS * PANEL_W + 16, height = (int)rows * PANEL_H + 60 + extra;
	if (standalone)
		fputs("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n", f);
	fprintf(f,
		"<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
		"viewBox=\"0 0 %d %d\" font-family=\"sans-serif\">\n",
		width, height, width, height);
	fprintf(f, "<rect width=\"%d\" height=\"%d\" fill=\"#fafafa\"/>\n", width, height);
	/* legend: every engine, in column order, whether or not it has figures */
	for (size_t e = 0; e < r->nengines; e++) {
		int x = 12 + (int)(e % LEGEND_PER_ROW) * 175;
		int y = 14 + (int)(e / LEGEND_PER_ROW) * LEGEND_ROW_H;
		fprintf(f,
			"<rect x=\"%d\" y=\"%d\" width=\"14\" height=\"4\" fill=\"%s\"/>"
			"<text x=\"%d\" y=\"%d\" font-size=\"12\">",
			x, y, palette[e % IDC_ARRAY_SIZE(palette)], x + 18, y + 6);
		perf_xml_text(f, r->engines[e].name);
		fputs(r->engines[e].available ? "" : " (unavailable)", f);
		fputs("</text>\n", f);
	}
	if (nt == 0)
		fputs("<text x=\"20\" y=\"60\" font-size=\"14\">no figures to plot</text>\n", f);
	for (size_t t = 0; t < nt; t++) {
		struct axes a = {.px = 8 + (int)(t % COLS) * PANEL_W,
				 .py = 36 + extra + (int)(t / COLS) * PANEL_H};
		unsigned th = min_threads(r, tests[t]);
		const struct perf_test *pt = perf_test_find(tests[t]);
		find_range(r, tests[t], th, &a);
		panel_frame(f, &a, tests[t], pt ? pt->unit : "", th);
		panel_lines(f, r, &a, tests[t], th);
		fputs("</g>\n", f);
	}
	fputs("</svg>\n", f);
}

/* ==== HTML =========================================================================== */

static void html_pre(FILE *f, const struct perf_results *a, const char *name_a,
		     const struct perf_results *b, const char *name_b)
{
	char *text = NULL;
	size_t len = 0;
	FILE *m = open_memstream(&text, &len);
	if (!m)
		return;
	if (b)
		perf_report_compare(m, a, name_a, b, name_b, false);
	else
		perf_report_table(m, a, false);
	fclose(m);
	fputs("<pre>", f);
	/* colour the direction words, as on a terminal */
	for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
		bool good = strstr(line, "faster than") != NULL, bad = strstr(line, "slower than");
		fputs(good && !bad   ? "<span class=\"good\">"
		      : bad && !good ? "<span class=\"bad\">"
				     : "<span>",
		      f);
		perf_xml_text(f, line);
		fputs("</span>\n", f);
	}
	fputs("</pre>\n", f);
	free(text);
}

void perf_html_write(FILE *f, const struct perf_results *a, const char *name_a,
		     const struct perf_results *b, const char *name_b)
{
	fputs("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
	      "<title>idcache perf</title>\n<style>\n"
	      "body{font-family:sans-serif;margin:2em;color:#222}"
	      "pre{font-size:12px;line-height:1.35;background:#f6f6f6;padding:1em;overflow-x:auto}"
	      ".good{color:#1b7837}.bad{color:#b2182b}td,th{padding:2px 10px;text-align:left}\n"
	      "</style></head><body>\n<h1>idcache perf</h1>\n<table>\n",
	      f);
	for (size_t i = 0; i < a->nfacts; i++) {
		fputs("<tr><th>", f);
		perf_xml_text(f, a->facts[i].key);
		fputs("</th><td>", f);
		perf_xml_text(f, a->facts[i].val);
		fputs("</td></tr>\n", f);
	}
	fputs("</table>\n<h2>Figures</h2>\n", f);
	html_pre(f, a, name_a, b, name_b);
	fputs("<h2>Plot</h2>\n", f);
	if (b) {
		fputs("<h3>", f);
		perf_xml_text(f, name_a);
		fputs("</h3>\n", f);
	}
	perf_svg_write(f, a, false);
	if (b) {
		fputs("<h3>", f);
		perf_xml_text(f, name_b);
		fputs("</h3>\n", f);
		perf_svg_write(f, b, false);
	}
	fputs("</body></html>\n", f);
}
