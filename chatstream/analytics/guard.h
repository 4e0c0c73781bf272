#include <stdint.h>

typedef struct sqlite3 sqlite3;
typedef struct sqlite3_stmt sqlite3_stmt;

// The progress handler runs every ANALYTICS_PROGRESS_STEPS virtual machine
// instructions; the string functions of guard.c count their work in the
// same units.
#define ANALYTICS_PROGRESS_STEPS 1000

// The largest string, blob or row a query may build or read on a guarded
// connection.
#define ANALYTICS_MAX_VALUE_BYTES (1 << 20)

// The longest LIKE or GLOB pattern. A match takes time proportional to the
// pattern's length times the string's, inside one instruction; guard.c's
// LIKE and GLOB charge it to the budget, and the bound keeps their
// recursion shallow.
#define ANALYTICS_MAX_PATTERN_BYTES 100

// The most SQLite's memory in use may grow while one query runs, checked
// by the progress handler. A guarded connection keeps its temporary
// tables, sorts and DISTINCT sets in memory (temp_store = MEMORY), so that
// this bounds them all; on disk nothing would. Its page cache of the
// database is capped (ANALYTICS_MAX_CACHE_KIB), so that reading a large
// database is not taken for a query's own use. SQLite counts its memory for
// the whole process, so the growth of queries that run at once counts for
// each of them.
#define ANALYTICS_MAX_MEMORY_BYTES (256LL << 20)
#define ANALYTICS_MAX_CACHE_KIB 32768

// The most columns of a query's result, and terms of an ORDER BY or GROUP
// BY (see analytics_checker_limit).
#define ANALYTICS_MAX_COLUMNS 256

struct analytics_budget {
	int active;
	long remaining;  // progress calls left before the statement is interrupted
	long long mem0;  // SQLite's memory in use when the query began
	int over_memory; // set when the query was interrupted for its memory
	long long carry; // work of guard.c's functions not charged yet
};

// One column of a result row: type is SQLite's fundamental type
// (1 integer, 2 float, 3 text, 4 blob, 5 null); p and n are valid until the
// next step.
struct analytics_cell {
	int type;
	long long i;
	double f;
	const void *p;
	int n;
};

// Flags of analytics_prepare.
#define ANALYTICS_READONLY 1
#define ANALYTICS_EXPLAIN 2
#define ANALYTICS_MORE 4
#define ANALYTICS_PARAMS 8

int analytics_install(sqlite3 *db, uintptr_t handle, struct analytics_budget *b);
long long analytics_memory_used(void);
int analytics_prepare(sqlite3 *db, const char *sql, int n, sqlite3_stmt **st, int *used, int *flags);
int analytics_step(sqlite3_stmt *st, int ncol, struct analytics_cell *cells, long long *bytes);
int analytics_finalize(sqlite3_stmt *st);
int analytics_column_count(sqlite3_stmt *st);
const char *analytics_column_name(sqlite3_stmt *st, int i);
const char *analytics_column_decltype(sqlite3_stmt *st, int i);
void analytics_interrupt(sqlite3 *db);
const char *analytics_errmsg(sqlite3 *db);
int analytics_checker_open(sqlite3 **out, int *stop);
void analytics_checker_stop(int *stop, int v);
int analytics_exec(sqlite3 *db, const char *sql);
void analytics_checker_limit(sqlite3 *db);
int analytics_close(sqlite3 *db);
int analytics_opens_database(sqlite3 *chk, const char *sql, int n);
