#include <stdint.h>

typedef struct sqlite3 sqlite3;
typedef struct sqlite3_stmt sqlite3_stmt;

// The progress handler runs every ANALYTICS_PROGRESS_STEPS virtual machine
// instructions.
#define ANALYTICS_PROGRESS_STEPS 1000

// The largest string, blob or row a query may build on a guarded
// connection.
#define ANALYTICS_MAX_VALUE_BYTES (8 << 20)

struct analytics_budget {
	int active;
	long remaining; // progress calls left before the statement is interrupted
};

void analytics_install(sqlite3 *db, uintptr_t handle, struct analytics_budget *b);
int analytics_check(sqlite3 *db, const char *sql, int n, int *used, int *readonly, int *explain, int *more, int *none, int *params);
const char *analytics_errmsg(sqlite3 *db);
