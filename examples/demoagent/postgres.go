package demoagent

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/embedkit/embedkit/chatstream/analytics"
)

// PostgresSchema is the PostgreSQL schema that [SetupPostgres] loads the
// sample data set into.
const PostgresSchema = "embedkit_demo"

// postgresSchemaSQL creates the tables of the sample data set in
// PostgresSchema. Prices are exact decimals, so that the sums the demo
// questions ask for, rounded to cents, are the same as in SQLite; times
// are text, as in SQLite, so that the same SQL compares them.
const postgresSchemaSQL = `
CREATE SCHEMA IF NOT EXISTS embedkit_demo;
CREATE TABLE IF NOT EXISTS embedkit_demo.customers (
	id         integer PRIMARY KEY,
	name       text NOT NULL,
	country    text NOT NULL,
	created_at text NOT NULL
);
CREATE TABLE IF NOT EXISTS embedkit_demo.products (
	id       integer PRIMARY KEY,
	name     text NOT NULL UNIQUE,
	category text NOT NULL,
	price    numeric(10, 2) NOT NULL
);
CREATE TABLE IF NOT EXISTS embedkit_demo.orders (
	id          integer PRIMARY KEY,
	customer_id integer NOT NULL REFERENCES embedkit_demo.customers(id),
	created_at  text NOT NULL
);
CREATE TABLE IF NOT EXISTS embedkit_demo.order_lines (
	id         integer PRIMARY KEY,
	order_id   integer NOT NULL REFERENCES embedkit_demo.orders(id),
	product_id integer NOT NULL REFERENCES embedkit_demo.products(id),
	quantity   integer NOT NULL,
	price      numeric(10, 2) NOT NULL
);
CREATE INDEX IF NOT EXISTS order_lines_order_id ON embedkit_demo.order_lines(order_id);
CREATE INDEX IF NOT EXISTS orders_customer_id ON embedkit_demo.orders(customer_id);
`

// SetupPostgres loads the sample data set into the schema [PostgresSchema]
// of the database admin connects to, unless it is there already, and sets
// up the analytics views over it ([analytics.SetupPostgres] with
// [PostgresModel] and cfg). It is idempotent, and safe when several
// processes start at once: the load runs in one transaction under an
// advisory lock, so one process loads and the others find the rows there.
// admin needs the rights analytics.SetupPostgres names, and to create the
// schema. Then [New] with [WithPostgres] answers over it.
func SetupPostgres(ctx context.Context, admin *sql.DB, cfg analytics.PostgresConfig) error {
	if err := loadPostgres(ctx, admin); err != nil {
		return err
	}
	if err := analytics.SetupPostgres(ctx, admin, PostgresModel(), cfg); err != nil {
		return fmt.Errorf("demoagent: %w", err)
	}
	return nil
}

// loadPostgres creates the tables and loads the rows, once.
func loadPostgres(ctx context.Context, admin *sql.DB) error {
	tx, err := admin.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("demoagent: load PostgreSQL: %w", err)
	}
	defer tx.Rollback() // a no-op after Commit
	if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock(hashtext('embedkit demo data set'))"); err != nil {
		return fmt.Errorf("demoagent: load PostgreSQL: lock: %w", err)
	}
	if _, err := tx.ExecContext(ctx, postgresSchemaSQL); err != nil {
		return fmt.Errorf("demoagent: load PostgreSQL: create tables: %w", err)
	}
	tables := generate()
	var lines int
	if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM embedkit_demo.order_lines").Scan(&lines); err != nil {
		return fmt.Errorf("demoagent: load PostgreSQL: %w", err)
	}
	if lines == len(tables[3].rows) {
		return nil // loaded by an earlier start, or by another process
	}
	if _, err := tx.ExecContext(ctx, "TRUNCATE embedkit_demo.order_lines, embedkit_demo.orders, embedkit_demo.products, embedkit_demo.customers"); err != nil {
		return fmt.Errorf("demoagent: load PostgreSQL: %w", err)
	}
	const rowsPerInsert = 400
	for _, t := range tables {
		for start := 0; start < len(t.rows); start += rowsPerInsert {
			chunk := t.rows[start:min(start+rowsPerInsert, len(t.rows))]
			var q strings.Builder
			q.WriteString("INSERT INTO " + PostgresSchema + "." + t.name + " (" + strings.Join(t.columns, ", ") + ") VALUES ")
			args := make([]any, 0, len(chunk)*len(t.columns))
			for i, r := range chunk {
				if i > 0 {
					q.WriteByte(',')
				}
				q.WriteByte('(')
				for j := range r {
					if j > 0 {
						q.WriteByte(',')
					}
					fmt.Fprintf(&q, "$%d", len(args)+1)
					args = append(args, r[j])
				}
				q.WriteByte(')')
			}
			if _, err := tx.ExecContext(ctx, q.String(), args...); err != nil {
				return fmt.Errorf("demoagent: load PostgreSQL %s: %w", t.name, err)
			}
		}
	}
	if _, err := tx.ExecContext(ctx, "ANALYZE embedkit_demo.customers, embedkit_demo.products, embedkit_demo.orders, embedkit_demo.order_lines"); err != nil {
		return fmt.Errorf("demoagent: load PostgreSQL: analyze: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("demoagent: load PostgreSQL: %w", err)
	}
	return nil
}
