// Hooks installed on a SQLite connection opened by
// github.com/mattn/go-sqlite3, whose sqlite3_* symbols this file links
// against, and the statement loop of the tool's queries. See guard.go.

#include <stddef.h>
#include <string.h>
#include "guard.h"

typedef struct sqlite3_context sqlite3_context;
typedef struct sqlite3_value sqlite3_value;

extern int sqlite3_set_authorizer(sqlite3 *, int (*)(void *, int, const char *, const char *, const char *, const char *), void *);
extern void sqlite3_progress_handler(sqlite3 *, int, int (*)(void *), void *);
extern int sqlite3_prepare_v2(sqlite3 *, const char *, int, sqlite3_stmt **, const char **);
extern int sqlite3_finalize(sqlite3_stmt *);
extern int sqlite3_step(sqlite3_stmt *);
extern int sqlite3_stmt_readonly(sqlite3_stmt *);
extern int sqlite3_stmt_isexplain(sqlite3_stmt *);
extern int sqlite3_bind_parameter_count(sqlite3_stmt *);
extern int sqlite3_column_count(sqlite3_stmt *);
extern const char *sqlite3_column_name(sqlite3_stmt *, int);
extern const char *sqlite3_column_decltype(sqlite3_stmt *, int);
extern int sqlite3_column_type(sqlite3_stmt *, int);
extern long long sqlite3_column_int64(sqlite3_stmt *, int);
extern double sqlite3_column_double(sqlite3_stmt *, int);
extern const unsigned char *sqlite3_column_text(sqlite3_stmt *, int);
extern const void *sqlite3_column_blob(sqlite3_stmt *, int);
extern int sqlite3_column_bytes(sqlite3_stmt *, int);
extern const char *sqlite3_errmsg(sqlite3 *);
extern int sqlite3_limit(sqlite3 *, int, int);
extern long long sqlite3_memory_used(void);
extern void sqlite3_interrupt(sqlite3 *);
extern int sqlite3_is_interrupted(sqlite3 *);
extern int sqlite3_create_function_v2(sqlite3 *, const char *, int, int, void *,
	void (*)(sqlite3_context *, int, sqlite3_value **),
	void (*)(sqlite3_context *, int, sqlite3_value **),
	void (*)(sqlite3_context *), void (*)(void *));
extern void *sqlite3_user_data(sqlite3_context *);
extern sqlite3 *sqlite3_context_db_handle(sqlite3_context *);
extern int sqlite3_value_type(sqlite3_value *);
extern const unsigned char *sqlite3_value_text(sqlite3_value *);
extern const void *sqlite3_value_blob(sqlite3_value *);
extern int sqlite3_value_bytes(sqlite3_value *);
extern void sqlite3_result_int(sqlite3_context *, int);
extern void sqlite3_result_text(sqlite3_context *, const char *, int, void (*)(void *));
extern void sqlite3_result_value(sqlite3_context *, sqlite3_value *);
extern void sqlite3_result_error_code(sqlite3_context *, int);
extern void sqlite3_result_error(sqlite3_context *, const char *, int);
extern void sqlite3_result_error_toobig(sqlite3_context *);
extern void sqlite3_result_error_nomem(sqlite3_context *);
extern void *sqlite3_malloc64(unsigned long long);
extern void sqlite3_free(void *);
extern int sqlite3_open_v2(const char *, sqlite3 **, int, const char *);
extern int sqlite3_close_v2(sqlite3 *);
extern int sqlite3_exec(sqlite3 *, const char *, void *, void *, char **);
extern int sqlite3_stmt_explain(sqlite3_stmt *, int);
extern int sqlite3_column_int(sqlite3_stmt *, int);
extern int sqlite3_test_control(int, ...);

#define SQLITE_ROW 100
#define SQLITE_INTERRUPT 9
#define SQLITE_NULL 5
#define SQLITE_BLOB 4
#define SQLITE_TEXT 3
#define SQLITE_UTF8 1
#define SQLITE_DETERMINISTIC 0x000000800
#define SQLITE_TRANSIENT ((void (*)(void *))-1)

// Implemented in Go (guard.go).
extern int analyticsAuthorize(uintptr_t, int, char *, char *, char *, char *);

static int authorize(void *p, int op, const char *a1, const char *a2, const char *a3, const char *a4) {
	return analyticsAuthorize((uintptr_t)p, op, (char *)a1, (char *)a2, (char *)a3, (char *)a4);
}

static int progress(void *p) {
	struct analytics_budget *b = p;
	if (!b->active) return 0;
	if (b->remaining <= 0) return 1;
	b->remaining--;
	// Between two calls a query adds at most a few lists of values
	// (ANALYTICS_MAX_COLUMNS values of at most ANALYTICS_MAX_VALUE_BYTES
	// each), so its memory overshoots the bound by at most that much.
	if (sqlite3_memory_used() - b->mem0 > ANALYTICS_MAX_MEMORY_BYTES) {
		b->over_memory = 1;
		return 1;
	}
	return 0;
}

long long analytics_memory_used(void) { return sqlite3_memory_used(); }

// spend charges work units (bytes compared) of a string function to the
// query's budget, as the progress handler charges instructions. It returns
// 1, with the function's result set to SQLITE_INTERRUPT, when the budget
// is used up or the query was interrupted (timeout, cancellation), so that
// even work inside one instruction stops.
static int spend(sqlite3_context *ctx, long long *work) {
	if (*work < ANALYTICS_PROGRESS_STEPS * 64) return 0;
	struct analytics_budget *b = sqlite3_user_data(ctx);
	long calls = (long)(*work / ANALYTICS_PROGRESS_STEPS);
	*work %= ANALYTICS_PROGRESS_STEPS;
	if (b->active) {
		b->remaining -= calls;
		if (b->remaining <= 0) {
			sqlite3_result_error_code(ctx, SQLITE_INTERRUPT);
			return 1;
		}
	}
	if (sqlite3_is_interrupted(sqlite3_context_db_handle(ctx))) {
		sqlite3_result_error_code(ctx, SQLITE_INTERRUPT);
		return 1;
	}
	return 0;
}

// carry returns the query's work not yet charged (less than a progress
// call's worth), which every function adds to: a call that does less than
// spend charges at once would otherwise drop its work, and a row of many
// such calls, computed without a jump, would never be charged or stopped.
static long long *carry(sqlite3_context *ctx) {
	return &((struct analytics_budget *)sqlite3_user_data(ctx))->carry;
}

// instr(X, Y), as SQLite's, with its work charged: the 1-based position of
// the first Y in X (in characters for text, bytes for blobs), 0 if none.
static void instr_func(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
	(void)argc;
	int th = sqlite3_value_type(argv[0]), tn = sqlite3_value_type(argv[1]);
	if (th == SQLITE_NULL || tn == SQLITE_NULL) return;
	int text = !(th == SQLITE_BLOB && tn == SQLITE_BLOB);
	const unsigned char *h, *nd;
	if (text) {
		h = sqlite3_value_text(argv[0]);
		nd = sqlite3_value_text(argv[1]);
	} else {
		h = sqlite3_value_blob(argv[0]);
		nd = sqlite3_value_blob(argv[1]);
	}
	int nh = sqlite3_value_bytes(argv[0]), nn = sqlite3_value_bytes(argv[1]);
	if (nn == 0) {
		sqlite3_result_int(ctx, 1);
		return;
	}
	if ((nh && h == NULL) || nd == NULL) {
		sqlite3_result_error_nomem(ctx);
		return;
	}
	long long *work = carry(ctx);
	int pos = 1;
	for (int i = 0; i + nn <= nh; i++) {
		if (text && (h[i] & 0xc0) == 0x80) continue;
		*work += nn;
		if (spend(ctx, work)) return;
		if (h[i] == nd[0] && memcmp(h + i, nd, nn) == 0) {
			sqlite3_result_int(ctx, pos);
			return;
		}
		pos++;
	}
	sqlite3_result_int(ctx, 0);
}

// replace(X, Y, Z), as SQLite's, with its work charged.
static void replace_func(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
	(void)argc;
	const unsigned char *s = sqlite3_value_text(argv[0]);
	if (s == NULL) return;
	int ns = sqlite3_value_bytes(argv[0]);
	const unsigned char *pat = sqlite3_value_text(argv[1]);
	if (pat == NULL) return;
	if (pat[0] == 0) {
		sqlite3_result_value(ctx, argv[0]);
		return;
	}
	int np = sqlite3_value_bytes(argv[1]);
	const unsigned char *rep = sqlite3_value_text(argv[2]);
	if (rep == NULL) return;
	int nr = sqlite3_value_bytes(argv[2]);
	// First pass: the output's size.
	long long out = 0, *work = carry(ctx);
	for (int i = 0; i < ns;) {
		*work += np;
		if (spend(ctx, work)) return;
		if (i + np <= ns && s[i] == pat[0] && memcmp(s + i, pat, np) == 0) {
			out += nr;
			i += np;
		} else {
			out++;
			i++;
		}
		if (out > ANALYTICS_MAX_VALUE_BYTES) {
			sqlite3_result_error_toobig(ctx);
			return;
		}
	}
	unsigned char *z = sqlite3_malloc64(out + 1);
	if (z == NULL) {
		sqlite3_result_error_nomem(ctx);
		return;
	}
	long long j = 0;
	for (int i = 0; i < ns;) {
		*work += np;
		if (spend(ctx, work)) {
			sqlite3_free(z);
			return;
		}
		if (i + np <= ns && s[i] == pat[0] && memcmp(s + i, pat, np) == 0) {
			memcpy(z + j, rep, nr);
			j += nr;
			i += np;
		} else {
			z[j++] = s[i++];
		}
	}
	z[j] = 0;
	sqlite3_result_text(ctx, (const char *)z, (int)j, sqlite3_free);
}

// utf8len is the length of the UTF-8 character starting with byte c.
static int utf8len(const unsigned char *z, int n) {
	int k = 1;
	while (k < n && (z[k] & 0xc0) == 0x80) k++;
	return k;
}

// in_set reports whether the character c (k bytes) is one of set's.
static int in_set(const unsigned char *c, int k, const unsigned char *set, int nset, long long *work) {
	for (int i = 0; i < nset;) {
		int l = utf8len(set + i, nset - i);
		*work += l;
		if (l == k && memcmp(c, set + i, k) == 0) return 1;
		i += l;
	}
	return 0;
}

// trim, ltrim and rtrim (flags: 1 left, 2 right), as SQLite's,
// with their work charged.
static void trim_any(sqlite3_context *ctx, int argc, sqlite3_value **argv, int flags) {
	if (sqlite3_value_type(argv[0]) == SQLITE_NULL) return;
	const unsigned char *z = sqlite3_value_text(argv[0]);
	if (z == NULL) return;
	int n = sqlite3_value_bytes(argv[0]);
	const unsigned char *set = (const unsigned char *)" ";
	int nset = 1;
	if (argc == 2) {
		set = sqlite3_value_text(argv[1]);
		if (set == NULL) return;
		nset = sqlite3_value_bytes(argv[1]);
	}
	long long *work = carry(ctx);
	if (nset > 0) {
		if (flags & 1) {
			while (n > 0) {
				int k = utf8len(z, n);
				if (!in_set(z, k, set, nset, work)) break;
				if (spend(ctx, work)) return;
				z += k;
				n -= k;
			}
		}
		if (flags & 2) {
			while (n > 0) {
				int k = 1;
				while (k < n && (z[n - k] & 0xc0) == 0x80) k++;
				if (!in_set(z + n - k, k, set, nset, work)) break;
				if (spend(ctx, work)) return;
				n -= k;
			}
		}
	}
	sqlite3_result_text(ctx, (const char *)z, n, SQLITE_TRANSIENT);
}

static void trim_func(sqlite3_context *ctx, int argc, sqlite3_value **argv) { trim_any(ctx, argc, argv, 3); }
static void ltrim_func(sqlite3_context *ctx, int argc, sqlite3_value **argv) { trim_any(ctx, argc, argv, 1); }
static void rtrim_func(sqlite3_context *ctx, int argc, sqlite3_value **argv) { trim_any(ctx, argc, argv, 2); }

// LIKE and GLOB, as SQLite's (patternCompare and likeFunc of its func.c,
// in the public domain, kept line for line), with their work charged: a
// pattern of '%' and '_' takes time proportional to its length times the
// string's, inside one instruction, and a row of many such matches runs
// without a jump at which the progress handler could stop it.

struct match_info {
	unsigned char all, one, set, nocase; // "*" or "%", "?" or "_", "[" or 0
};
static const struct match_info glob_info = {'*', '?', '[', 0};
static const struct match_info like_info = {'%', '_', 0, 1};
static const struct match_info like_cs_info = {'%', '_', 0, 0}; // PRAGMA case_sensitive_like

enum { MATCH, NOMATCH, NOWILDCARDMATCH, STOPPED };

static const unsigned char utf8_trans1[] = {
	0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f,
	0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f,
	0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f,
	0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x00, 0x01, 0x02, 0x03, 0x00, 0x01, 0x00, 0x00,
};

// utf8_read reads one character of a NUL-terminated string, as SQLite's
// sqlite3Utf8Read (a malformed sequence reads as U+FFFD).
static unsigned int utf8_read(const unsigned char **pz) {
	unsigned int c = *((*pz)++);
	if (c >= 0xc0) {
		c = utf8_trans1[c - 0xc0];
		while ((**pz & 0xc0) == 0x80) c = (c << 6) + (0x3f & *((*pz)++));
		if (c < 0x80 || (c & 0xFFFFF800) == 0xD800 || (c & 0xFFFFFFFE) == 0xFFFE) c = 0xFFFD;
	}
	return c;
}
#define UTF8_READ(A) (A[0] < 0x80 ? *(A++) : utf8_read(&A))
#define SKIP_UTF8(z) { if (*(z++) >= 0xc0) { while ((*z & 0xc0) == 0x80) z++; } }

static unsigned int ascii_lower(unsigned int c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }
static unsigned int ascii_upper(unsigned int c) { return c >= 'a' && c <= 'z' ? c - 32 : c; }

// CHARGE adds n units of work and returns STOPPED (the function's result
// set to SQLITE_INTERRUPT) once the budget is used up or the query was
// interrupted.
#define CHARGE(n) do { *work += (n); if (spend(ctx, work)) return STOPPED; } while (0)

// S_READ reads the string's next character into c and S_SKIP skips it,
// each adding the bytes it took to the work: a malformed character (a
// lead byte and a run of continuation bytes) can be any length.
#define S_READ(c) do { const unsigned char *s0_ = zString; c = UTF8_READ(zString); *work += zString - s0_; } while (0)
#define S_SKIP() do { const unsigned char *s0_ = zString; SKIP_UTF8(zString); *work += zString - s0_; } while (0)

static int pattern_compare(sqlite3_context *ctx, long long *work, const unsigned char *zPattern,
	const unsigned char *zString, const struct match_info *pInfo, unsigned int matchOther) {
	unsigned int c, c2;
	unsigned int matchOne = pInfo->one, matchAll = pInfo->all;
	unsigned char noCase = pInfo->nocase;
	const unsigned char *zEscaped = 0;
	CHARGE(1);
	while ((c = UTF8_READ(zPattern)) != 0) {
		CHARGE(1);
		if (c == matchAll) {
			while ((c = UTF8_READ(zPattern)) == matchAll || (c == matchOne && matchOne != 0)) {
				CHARGE(1);
				if (c == matchOne) {
					S_READ(c2);
					if (c2 == 0) return NOWILDCARDMATCH;
				}
			}
			if (c == 0) {
				return MATCH;
			} else if (c == matchOther) {
				if (pInfo->set == 0) {
					c = utf8_read(&zPattern);
					if (c == 0) return NOWILDCARDMATCH;
				} else {
					while (*zString) {
						int bMatch = pattern_compare(ctx, work, &zPattern[-1], zString, pInfo, matchOther);
						if (bMatch != NOMATCH) return bMatch;
						S_SKIP();
						CHARGE(1);
					}
					return NOWILDCARDMATCH;
				}
			}
			if (c < 0x80) {
				char zStop[3];
				int bMatch;
				if (noCase) {
					zStop[0] = (char)ascii_upper(c);
					zStop[1] = (char)ascii_lower(c);
					zStop[2] = 0;
				} else {
					zStop[0] = (char)c;
					zStop[1] = 0;
				}
				while (1) {
					size_t skip = strcspn((const char *)zString, zStop);
					zString += skip;
					CHARGE((long long)skip + 1);
					if (zString[0] == 0) break;
					zString++;
					bMatch = pattern_compare(ctx, work, zPattern, zString, pInfo, matchOther);
					if (bMatch != NOMATCH) return bMatch;
				}
			} else {
				int bMatch;
				while (1) {
					S_READ(c2);
					if (c2 == 0) break;
					CHARGE(1);
					if (c2 != c) continue;
					bMatch = pattern_compare(ctx, work, zPattern, zString, pInfo, matchOther);
					if (bMatch != NOMATCH) return bMatch;
				}
			}
			return NOWILDCARDMATCH;
		}
		if (c == matchOther) {
			if (pInfo->set == 0) {
				c = utf8_read(&zPattern);
				if (c == 0) return NOMATCH;
				zEscaped = zPattern;
			} else {
				unsigned int prior_c = 0;
				int seen = 0, invert = 0;
				S_READ(c);
				if (c == 0) return NOMATCH;
				c2 = utf8_read(&zPattern);
				if (c2 == '^') {
					invert = 1;
					c2 = utf8_read(&zPattern);
				}
				if (c2 == ']') {
					if (c == ']') seen = 1;
					c2 = utf8_read(&zPattern);
				}
				while (c2 && c2 != ']') {
					CHARGE(1);
					if (c2 == '-' && zPattern[0] != ']' && zPattern[0] != 0 && prior_c > 0) {
						c2 = utf8_read(&zPattern);
						if (c >= prior_c && c <= c2) seen = 1;
						prior_c = 0;
					} else {
						if (c == c2) seen = 1;
						prior_c = c2;
					}
					c2 = utf8_read(&zPattern);
				}
				if (c2 == 0 || (seen ^ invert) == 0) return NOMATCH;
				continue;
			}
		}
		S_READ(c2);
		if (c == c2) continue;
		if (noCase && ascii_lower(c) == ascii_lower(c2) && c < 0x80 && c2 < 0x80) continue;
		if (c == matchOne && zPattern != zEscaped && c2 != 0) continue;
		return NOMATCH;
	}
	return *zString == 0 ? MATCH : NOMATCH;
}

static int utf8_char_len(const unsigned char *z) {
	int r = 0;
	while (*z != 0) {
		SKIP_UTF8(z);
		r++;
	}
	return r;
}

// like_any is SQLite's likeFunc: X LIKE P ESCAPE E calls like(P, X, E),
// X GLOB P calls glob(P, X).
static void like_any(sqlite3_context *ctx, int argc, sqlite3_value **argv, const struct match_info *info) {
	struct match_info backup;
	unsigned int escape;
	if (sqlite3_value_bytes(argv[0]) > ANALYTICS_MAX_PATTERN_BYTES) {
		sqlite3_result_error(ctx, "LIKE or GLOB pattern too complex", -1);
		return;
	}
	if (argc == 3) {
		const unsigned char *zEsc = sqlite3_value_text(argv[2]);
		if (zEsc == 0) return;
		if (utf8_char_len(zEsc) != 1) {
			sqlite3_result_error(ctx, "ESCAPE expression must be a single character", -1);
			return;
		}
		escape = utf8_read(&zEsc);
		if (escape == info->all || escape == info->one) {
			backup = *info;
			if (escape == backup.all) backup.all = 0;
			if (escape == backup.one) backup.one = 0;
			info = &backup;
		}
	} else {
		escape = info->set;
	}
	const unsigned char *zB = sqlite3_value_text(argv[0]), *zA = sqlite3_value_text(argv[1]);
	if (zA && zB) {
		long long *work = carry(ctx);
		int r = pattern_compare(ctx, work, zB, zA, info, escape);
		if (r != STOPPED) sqlite3_result_int(ctx, r == MATCH);
	}
}

static void like_func(sqlite3_context *ctx, int argc, sqlite3_value **argv) { like_any(ctx, argc, argv, &like_info); }
static void like_cs_func(sqlite3_context *ctx, int argc, sqlite3_value **argv) { like_any(ctx, argc, argv, &like_cs_info); }
static void glob_func(sqlite3_context *ctx, int argc, sqlite3_value **argv) { like_any(ctx, argc, argv, &glob_info); }

int analytics_install(sqlite3 *db, uintptr_t handle, struct analytics_budget *b) {
	sqlite3_set_authorizer(db, authorize, (void *)handle);
	sqlite3_progress_handler(db, ANALYTICS_PROGRESS_STEPS, progress, b);
	// A single instruction can build or scan a large value (zeroblob,
	// printf, LIKE), which the progress handler cannot interrupt: bound
	// values, patterns and statements, and replace the built-in functions
	// whose work grows faster than their input, or with a pattern, by ones
	// that charge it.
	sqlite3_limit(db, 0 /* SQLITE_LIMIT_LENGTH */, ANALYTICS_MAX_VALUE_BYTES);
	sqlite3_limit(db, 1 /* SQLITE_LIMIT_SQL_LENGTH */, 1 << 20);
	sqlite3_limit(db, 8 /* SQLITE_LIMIT_LIKE_PATTERN_LENGTH */, ANALYTICS_MAX_PATTERN_BYTES);
	sqlite3_test_control(15 /* SQLITE_TESTCTRL_OPTIMIZATIONS */, db, 0x1 /* SQLITE_QueryFlattener */);
	int f = SQLITE_UTF8 | SQLITE_DETERMINISTIC, rc = 0;
	// LIKE as the connection's own: case-sensitive when it was opened so
	// (PRAGMA case_sensitive_like, go-sqlite3's _cslike).
	int nocase = 1;
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(db, "SELECT 'a' LIKE 'A'", -1, &st, NULL) == 0 && sqlite3_step(st) == SQLITE_ROW) {
		nocase = sqlite3_column_int(st, 0);
	}
	sqlite3_finalize(st);
	void (*like)(sqlite3_context *, int, sqlite3_value **) = nocase ? like_func : like_cs_func;
	rc |= sqlite3_create_function_v2(db, "instr", 2, f, b, instr_func, NULL, NULL, NULL);
	rc |= sqlite3_create_function_v2(db, "replace", 3, f, b, replace_func, NULL, NULL, NULL);
	rc |= sqlite3_create_function_v2(db, "like", 2, f, b, like, NULL, NULL, NULL);
	rc |= sqlite3_create_function_v2(db, "like", 3, f, b, like, NULL, NULL, NULL);
	rc |= sqlite3_create_function_v2(db, "glob", 2, f, b, glob_func, NULL, NULL, NULL);
	for (int n = 1; n <= 2; n++) {
		rc |= sqlite3_create_function_v2(db, "trim", n, f, b, trim_func, NULL, NULL, NULL);
		rc |= sqlite3_create_function_v2(db, "ltrim", n, f, b, ltrim_func, NULL, NULL, NULL);
		rc |= sqlite3_create_function_v2(db, "rtrim", n, f, b, rtrim_func, NULL, NULL, NULL);
	}
	return rc;
}

int analytics_prepare(sqlite3 *db, const char *sql, int n, sqlite3_stmt **out, int *used, int *flags) {
	sqlite3_stmt *st = NULL;
	const char *tail = NULL;
	*out = NULL;
	*flags = 0;
	int rc = sqlite3_prepare_v2(db, sql, n, &st, &tail);
	*used = tail ? (int)(tail - sql) : n;
	if (rc != 0) return rc;
	if (st == NULL) return 0;
	if (sqlite3_stmt_readonly(st)) *flags |= ANALYTICS_READONLY;
	if (sqlite3_stmt_isexplain(st)) *flags |= ANALYTICS_EXPLAIN;
	if (sqlite3_bind_parameter_count(st)) *flags |= ANALYTICS_PARAMS;
	const char *rest = sql + *used;
	while (rest < sql + n) {
		sqlite3_stmt *next = NULL;
		const char *after = NULL;
		rc = sqlite3_prepare_v2(db, rest, (int)(sql + n - rest), &next, &after);
		if (next != NULL) {
			sqlite3_finalize(next);
			*flags |= ANALYTICS_MORE;
			break;
		}
		if (rc != 0 || after == NULL || after <= rest) {
			if (rc != 0) *flags |= ANALYTICS_MORE;
			break;
		}
		rest = after;
	}
	*out = st;
	return 0;
}

int analytics_step(sqlite3_stmt *st, int ncol, struct analytics_cell *cells, long long *bytes) {
	int rc = sqlite3_step(st);
	*bytes = 0;
	if (rc != SQLITE_ROW) return rc;
	for (int i = 0; i < ncol; i++) {
		struct analytics_cell *c = &cells[i];
		c->type = sqlite3_column_type(st, i);
		c->p = NULL;
		c->n = 0;
		switch (c->type) {
		case 1:
			c->i = sqlite3_column_int64(st, i);
			*bytes += 20;
			break;
		case 2:
			c->f = sqlite3_column_double(st, i);
			*bytes += 24;
			break;
		case SQLITE_TEXT:
			c->p = sqlite3_column_text(st, i);
			c->n = sqlite3_column_bytes(st, i);
			*bytes += c->n;
			break;
		case SQLITE_BLOB:
			c->p = sqlite3_column_blob(st, i);
			c->n = sqlite3_column_bytes(st, i);
			*bytes += 2 + 2 * (long long)c->n; // written as \x and hex (guard.go)
			break;
		default:
			*bytes += 4;
		}
	}
	return rc;
}

int analytics_finalize(sqlite3_stmt *st) { return sqlite3_finalize(st); }
int analytics_column_count(sqlite3_stmt *st) { return sqlite3_column_count(st); }
const char *analytics_column_name(sqlite3_stmt *st, int i) { return sqlite3_column_name(st, i); }
const char *analytics_column_decltype(sqlite3_stmt *st, int i) { return sqlite3_column_decltype(st, i); }
void analytics_interrupt(sqlite3 *db) { sqlite3_interrupt(db); }
const char *analytics_errmsg(sqlite3 *db) { return sqlite3_errmsg(db); }

// checker_authorize refuses everything once *stop is set: the compiler
// calls it for every SELECT and column it resolves, and sqlite3_interrupt
// does not reach the compiler, whose work can grow exponentially with the
// size of a query.
static int checker_authorize(void *p, int op, const char *a1, const char *a2, const char *a3, const char *a4) {
	(void)op, (void)a1, (void)a2, (void)a3, (void)a4;
	return __atomic_load_n((int *)p, __ATOMIC_RELAXED) ? 1 /* SQLITE_DENY */ : 0;
}

void analytics_checker_stop(int *stop, int v) { __atomic_store_n(stop, v, __ATOMIC_RELAXED); }

// analytics_checker_open opens an empty in-memory database, on which the
// tool builds a copy of the schema and compiles each query once more over
// empty stand-ins of its views to see what the query reads by itself.
// Compiling there stops once *stop is set.
int analytics_checker_open(sqlite3 **out, int *stop) {
	*out = NULL;
	int rc = sqlite3_open_v2(":memory:", out, 2 | 4 /* SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE */, NULL);
	if (rc == 0) sqlite3_set_authorizer(*out, checker_authorize, stop);
	if (rc == 0) sqlite3_test_control(15 /* SQLITE_TESTCTRL_OPTIMIZATIONS */, *out, 0x1 /* SQLITE_QueryFlattener */);
	return rc;
}

// analytics_checker_limit bounds the lists of a query the checker
// compiles, which every query passes before it runs: the progress handler
// runs only at some jumps of a statement's program, and a list of
// expressions (result columns, ORDER BY or GROUP BY terms) is computed
// without one, each value held in a register, so bounding the lists bounds
// what a query holds between two checks of its memory. (On the guarded
// connection itself the limit would also apply to the host's tables when
// SQLite reloads their schema.)
void analytics_checker_limit(sqlite3 *db) { sqlite3_limit(db, 2 /* SQLITE_LIMIT_COLUMN */, ANALYTICS_MAX_COLUMNS); }

int analytics_exec(sqlite3 *db, const char *sql) { return sqlite3_exec(db, sql, NULL, NULL, NULL); }
int analytics_close(sqlite3 *db) { return sqlite3_close_v2(db); }

// analytics_opens_database compiles sql on the checker connection and
// reports whether its program opens a table or index of a database other
// than temp, or temp's own schema table (root page 1) (1), neither (0),
// is not a SELECT (2: it writes, or returns no columns, as REINDEX or
// DROP TRIGGER IF EXISTS, which compile here to an empty program that
// writes nothing and on the guarded connection would run or be refused by
// what its database holds), is EXPLAIN (3), or does not compile (-1, with
// the message in sqlite3_errmsg). The checker's temp schema holds only empty
// stand-ins of the model's views, so a program that opens anything else
// reads the database by itself: a base table, the schema (whose temp
// part holds the views' SQL), or a table outside the model, however it
// names it. This covers what SQLite's authorizer is not asked about: the
// columns of a USING or NATURAL join (a FULL JOIN's USING column even
// returns the right table's value), and a table of which no column is
// used (count(*)).
int analytics_opens_database(sqlite3 *chk, const char *sql, int n) {
	sqlite3_stmt *st = NULL;
	int rc = sqlite3_prepare_v2(chk, sql, n, &st, NULL);
	if (rc != 0) return -1;
	if (st == NULL) return 0; // no statement: it reads nothing
	if (sqlite3_stmt_isexplain(st)) {
		sqlite3_finalize(st);
		return 3;
	}
	if (!sqlite3_stmt_readonly(st) || sqlite3_column_count(st) == 0) {
		sqlite3_finalize(st);
		return 2;
	}
	int found = 0;
	if (sqlite3_stmt_explain(st, 1) != 0) {
		found = -1;
	}
	while (found == 0 && sqlite3_step(st) == SQLITE_ROW) {
		const char *op = (const char *)sqlite3_column_text(st, 1);
		if (op && (strcmp(op, "OpenRead") == 0 || strcmp(op, "OpenWrite") == 0 || strcmp(op, "ReopenIdx") == 0) &&
		    (sqlite3_column_int(st, 4) != 1 || sqlite3_column_int(st, 3) == 1)) {
			found = 1;
		}
	}
	sqlite3_finalize(st);
	return found;
}
