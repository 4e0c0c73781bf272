// Hooks installed on a SQLite connection opened by
// github.com/mattn/go-sqlite3, whose sqlite3_* symbols this file links
// against. See guard.go.

#include <stddef.h>
#include "guard.h"

extern int sqlite3_set_authorizer(sqlite3 *, int (*)(void *, int, const char *, const char *, const char *, const char *), void *);
extern void sqlite3_progress_handler(sqlite3 *, int, int (*)(void *), void *);
extern int sqlite3_prepare_v2(sqlite3 *, const char *, int, sqlite3_stmt **, const char **);
extern int sqlite3_finalize(sqlite3_stmt *);
extern int sqlite3_stmt_readonly(sqlite3_stmt *);
extern int sqlite3_stmt_isexplain(sqlite3_stmt *);
extern int sqlite3_bind_parameter_count(sqlite3_stmt *);
extern const char *sqlite3_errmsg(sqlite3 *);
extern int sqlite3_limit(sqlite3 *, int, int);

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
	return 0;
}

void analytics_install(sqlite3 *db, uintptr_t handle, struct analytics_budget *b) {
	sqlite3_set_authorizer(db, authorize, (void *)handle);
	sqlite3_progress_handler(db, ANALYTICS_PROGRESS_STEPS, progress, b);
	// A single instruction can build a huge value (zeroblob, printf,
	// replace) that the progress handler cannot interrupt: bound values
	// and statements instead.
	sqlite3_limit(db, 0 /* SQLITE_LIMIT_LENGTH */, ANALYTICS_MAX_VALUE_BYTES);
	sqlite3_limit(db, 1 /* SQLITE_LIMIT_SQL_LENGTH */, 1 << 20);
}

int analytics_check(sqlite3 *db, const char *sql, int n, int *used, int *readonly, int *explain, int *more, int *none, int *params) {
	sqlite3_stmt *st = NULL;
	const char *tail = NULL;
	int rc = sqlite3_prepare_v2(db, sql, n, &st, &tail);
	*used = tail ? (int)(tail - sql) : n;
	*readonly = 0;
	*explain = 0;
	*more = 0;
	*none = 0;
	*params = 0;
	if (rc != 0) return rc;
	if (st == NULL) {
		*none = 1;
		return 0;
	}
	*readonly = sqlite3_stmt_readonly(st);
	*explain = sqlite3_stmt_isexplain(st);
	*params = sqlite3_bind_parameter_count(st);
	sqlite3_finalize(st);
	const char *rest = sql + *used;
	while (rest < sql + n) {
		sqlite3_stmt *next = NULL;
		const char *after = NULL;
		rc = sqlite3_prepare_v2(db, rest, (int)(sql + n - rest), &next, &after);
		if (next != NULL) {
			sqlite3_finalize(next);
			*more = 1;
			break;
		}
		if (rc != 0 || after == NULL || after <= rest) {
			*more = rc != 0;
			break;
		}
		rest = after;
	}
	return 0;
}

const char *analytics_errmsg(sqlite3 *db) { return sqlite3_errmsg(db); }
