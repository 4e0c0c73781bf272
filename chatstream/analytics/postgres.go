package analytics

import (
	"bytes"
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/embedkit/embedkit/chatstream"
)

// PostgresConfig names the PostgreSQL objects of the analytics tools.
// Roles are shared by the whole PostgreSQL server: give each deployment
// (or test) its own names. The zero value means the defaults.
type PostgresConfig struct {
	// Schema holds the tool's views, its access table and its function.
	// Default "embedkit_analytics".
	Schema string
	// Owner is the role that owns the schema's objects and reads the
	// host's tables through them; it cannot log in. Default
	// "embedkit_analytics_owner".
	Owner string
	// Reader is the role queries run as: the login role of the *sql.DB
	// given to [NewPostgresSQLTool]. It can read the model's views and
	// nothing else. Default "embedkit_analytics_reader".
	Reader string
}

func (c PostgresConfig) withDefaults() PostgresConfig {
	if c.Schema == "" {
		c.Schema = "embedkit_analytics"
	}
	if c.Owner == "" {
		c.Owner = "embedkit_analytics_owner"
	}
	if c.Reader == "" {
		c.Reader = "embedkit_analytics_reader"
	}
	return c
}

// maxPostgresRowBytes bounds one row as PostgreSQL sends it.
const maxPostgresRowBytes = 16 << 20

// errRowTooLarge refuses a row over maxPostgresRowBytes, for the tool and
// for the data query API (whose results have no size cap of their own).
var errRowTooLarge = toolErr("a row is larger than %d MiB; select fewer or shorter columns", maxPostgresRowBytes>>20)

// beyondTransaction names the functions of pg_catalog, executable by PUBLIC
// by default, whose effects reach beyond the calling query's transaction:
// advisory locks, which other sessions (embedkit's own coordination among
// them) wait on and which fill the server's shared lock table; a WAL
// message that no rollback removes; and stopping other sessions of the
// same role, that is other users' queries. The reader must not be able to
// execute any of them: [SetupPostgres] revokes them from PUBLIC, and
// [NewPostgresSQLTool] refuses a reader that can.
var beyondTransaction = []string{
	"pg_advisory_lock", "pg_advisory_lock_shared", "pg_advisory_xact_lock", "pg_advisory_xact_lock_shared",
	"pg_try_advisory_lock", "pg_try_advisory_lock_shared", "pg_try_advisory_xact_lock", "pg_try_advisory_xact_lock_shared",
	"pg_logical_emit_message", "pg_cancel_backend", "pg_terminate_backend",
}

// uninterruptible names the functions of pg_catalog that evaluate XPath
// in libxml2, which never checks PostgreSQL's interrupts: neither
// statement_timeout nor a cancel request (nor pg_terminate_backend) stops
// one, so a query of a few nested count()s over a few hundred nodes runs
// for minutes or days past its timeout, keeping its backend, a core and a
// connection slot, and a user repeating it takes every connection of the
// server. Revoked and checked with beyondTransaction; XMLTABLE, syntax
// rather than a function, is refused by its plan (refuseXMLTable). The
// functions that parse text as XML (xml(text), the cast from text, and
// xml_is_well_formed*) go with them: parsing ignores interrupts too, in
// time linear in what a query built (XMLPARSE, syntax, still parses: see
// docs/analytics-tools.md).
var uninterruptible = []string{"xpath", "xpath_exists", "xmlexists",
	"xml", "xml_is_well_formed", "xml_is_well_formed_document", "xml_is_well_formed_content"}

// runsQueryText names the functions of pg_catalog that run SQL text given
// as an argument, whose plan the tool never sees: an XMLTABLE inside one
// would run past the timeout as above. (ts_rewrite's form of three
// tsqueries, which runs nothing, goes with the one that does.)
var runsQueryText = []string{"query_to_xml", "query_to_xmlschema", "query_to_xml_and_xmlschema", "ts_stat", "ts_rewrite"}

// extensionLibraries are the libraries of extensions whose functions the
// reader must not execute: xml2's evaluate XPath and run SQL text
// (xpath_table), dblink's reach other databases. A host that installs one
// revokes them itself; NewPostgresSQLTool checks.
var extensionLibraries = []string{"$libdir/pgxml", "$libdir/dblink"}

// revokedFunctions are the names of pg_catalog's functions the reader must
// not execute.
var revokedFunctions = slices.Concat(beyondTransaction, uninterruptible, runsQueryText)

// readerTempFileLimit bounds the temporary files of one of the reader's
// queries (a sort or hash that spills to disk); set by SetupPostgres when it
// runs as a superuser, since only a superuser can change it, so that no
// query can raise it.
const readerTempFileLimit = "1GB"

// SetupPostgres creates or updates, through admin, the PostgreSQL objects
// of the analytics tools over m: the roles (when missing: the owner
// without login, the reader with login and no password), the schema and,
// owned by the owner, one view per model view (security_barrier, reading
// the view's SQL and applying its row filters to the access of the
// current transaction), the table the access is kept in and the function
// that sets it. It grants the owner SELECT on the tables the views read
// (and USAGE on their schemas), and the reader USAGE on the schema, SELECT
// on the model's views and EXECUTE on the function; nothing else.
//
// admin must be able to create roles (or the roles exist), own or be
// granted with grant option the host's tables, and become the owner role
// (SetupPostgres grants it the owner role when it is not a superuser).
// SetupPostgres is idempotent and holds an advisory lock while it works,
// so that replicas starting at once set up one after the other. A view's
// SQL names the host's tables as PostgreSQL resolves them for admin
// (schema-qualified is best).
func SetupPostgres(ctx context.Context, admin *sql.DB, m *Model, cfg PostgresConfig) error {
	if admin == nil {
		panic("analytics: SetupPostgres: admin must not be nil, got nil")
	}
	if msg := m.check(); msg != "" {
		panic("analytics: SetupPostgres: invalid model: " + msg)
	}
	cfg = cfg.withDefaults()
	tx, err := admin.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("analytics: set up PostgreSQL: %w", err)
	}
	defer tx.Rollback()
	s, owner, reader := quoteIdent(cfg.Schema), quoteIdent(cfg.Owner), quoteIdent(cfg.Reader)
	lit := quoteLiteral
	stmts := []string{
		fmt.Sprintf("SELECT pg_advisory_xact_lock(hashtext(%s))", lit("embedkit analytics setup")),
		fmt.Sprintf(`DO $$ BEGIN
			IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = %s) THEN CREATE ROLE %s NOLOGIN; END IF;
			IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = %s) THEN CREATE ROLE %s LOGIN; END IF;
			IF NOT (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) AND NOT pg_has_role(current_user, %s, 'MEMBER') THEN
				EXECUTE format('GRANT %%I TO %%I', %s, current_user);
			END IF;
		END $$`, lit(cfg.Owner), owner, lit(cfg.Reader), reader, lit(cfg.Owner), lit(cfg.Owner)),
		fmt.Sprintf("CREATE SCHEMA IF NOT EXISTS %s", s),
		fmt.Sprintf("ALTER SCHEMA %s OWNER TO %s", s, owner),
		fmt.Sprintf("REVOKE ALL ON SCHEMA %s FROM PUBLIC", s),
	}
	for _, v := range m.Views {
		stmts = append(stmts,
			fmt.Sprintf("DROP VIEW IF EXISTS %s.%s CASCADE", s, quoteIdent(v.Name)),
			fmt.Sprintf("DROP VIEW IF EXISTS %s.%s CASCADE", s, quoteIdent(sourcePrefix+v.Name)))
	}
	stmts = append(stmts,
		fmt.Sprintf("CREATE UNLOGGED TABLE IF NOT EXISTS %s.embedkit_access (pid integer NOT NULL, xid bigint NOT NULL, attr text NOT NULL, value text NOT NULL)", s),
		fmt.Sprintf("CREATE INDEX IF NOT EXISTS embedkit_access_key ON %s.embedkit_access (pid, xid, attr)", s),
		fmt.Sprintf("ALTER TABLE %s.embedkit_access OWNER TO %s", s, owner),
		fmt.Sprintf("REVOKE ALL ON %s.embedkit_access FROM PUBLIC", s),
		// The access of the current transaction: written by the tool
		// before the transaction turns read-only, so that the query,
		// which runs read-only, cannot call it.
		fmt.Sprintf(`CREATE OR REPLACE FUNCTION %[1]s.embedkit_begin(access jsonb) RETURNS void
			LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $f$
			DELETE FROM %[1]s.embedkit_access WHERE pid = pg_backend_pid();
			INSERT INTO %[1]s.embedkit_access (pid, xid, attr, value)
				SELECT pg_backend_pid(), txid_current(), e.key, v.value
				FROM jsonb_each(access) AS e, jsonb_array_elements_text(e.value) AS v;
			$f$`, s),
		fmt.Sprintf("ALTER FUNCTION %s.embedkit_begin(jsonb) OWNER TO %s", s, owner),
		fmt.Sprintf("REVOKE ALL ON FUNCTION %s.embedkit_begin(jsonb) FROM PUBLIC", s),
		fmt.Sprintf("GRANT EXECUTE ON FUNCTION %s.embedkit_begin(jsonb) TO %s", s, reader),
		fmt.Sprintf("GRANT USAGE ON SCHEMA %s TO %s", s, reader),
	)
	access := func(key string) string {
		return fmt.Sprintf("SELECT a.value FROM %s.embedkit_access AS a WHERE a.pid = pg_backend_pid() AND a.xid = txid_current() AND a.attr = %s", s, lit(key))
	}
	for i, v := range m.Views {
		src := s + "." + quoteIdent(sourcePrefix+v.Name)
		where := fmt.Sprintf("EXISTS (%s)", access(""))
		if len(v.Filters) > 0 {
			var conds []string
			for j, f := range v.Filters {
				conds = append(conds, fmt.Sprintf("((%s)::text IN (%s))", f.Column, access(filterKey(i, j, f))))
			}
			where += " OR (" + strings.Join(conds, " AND ") + ")"
		} else {
			where = "true"
		}
		stmts = append(stmts,
			fmt.Sprintf("CREATE VIEW %s AS %s", src, v.SQL),
			fmt.Sprintf("ALTER VIEW %s OWNER TO %s", src, owner),
			fmt.Sprintf("REVOKE ALL ON %s FROM PUBLIC", src),
			// security_barrier: the query's own conditions run after the
			// row filters, so that no function of the query sees a row the
			// user may not (an error raised on one, for example).
			fmt.Sprintf("CREATE VIEW %s.%s WITH (security_barrier) AS SELECT src.* FROM %s AS src WHERE %s", s, quoteIdent(v.Name), src, where),
			fmt.Sprintf("ALTER VIEW %s.%s OWNER TO %s", s, quoteIdent(v.Name), owner),
			fmt.Sprintf("REVOKE ALL ON %s.%s FROM PUBLIC", s, quoteIdent(v.Name)),
			fmt.Sprintf("GRANT SELECT ON %s.%s TO %s", s, quoteIdent(v.Name), reader),
		)
	}
	for _, q := range stmts {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("analytics: set up PostgreSQL: %s: %w", firstLine(q), err)
		}
	}
	// The owner reads the tables behind the views.
	rows, err := tx.QueryContext(ctx, `SELECT DISTINCT format('%I.%I', n.nspname, c.relname), quote_ident(n.nspname)
		FROM pg_depend d JOIN pg_rewrite r ON r.oid = d.objid
		JOIN pg_class c ON c.oid = d.refobjid JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE r.ev_class IN (SELECT oid FROM pg_class WHERE relnamespace = $1::regnamespace AND relname LIKE 'embedkit\_source\_%')
		AND c.relkind IN ('r', 'v', 'm', 'p', 'f') AND n.nspname <> $2`, cfg.Schema, cfg.Schema)
	if err != nil {
		return fmt.Errorf("analytics: set up PostgreSQL: find the tables of the views: %w", err)
	}
	var grants []string
	for rows.Next() {
		var table, schema string
		if err := rows.Scan(&table, &schema); err != nil {
			rows.Close()
			return fmt.Errorf("analytics: set up PostgreSQL: %w", err)
		}
		grants = append(grants, fmt.Sprintf("GRANT USAGE ON SCHEMA %s TO %s", schema, owner), fmt.Sprintf("GRANT SELECT ON %s TO %s", table, owner))
	}
	rows.Close()
	for _, q := range grants {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("analytics: set up PostgreSQL: %s: %w", q, err)
		}
	}
	if err := confineReader(ctx, tx, cfg); err != nil {
		return fmt.Errorf("analytics: set up PostgreSQL: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("analytics: set up PostgreSQL: %w", err)
	}
	return nil
}

// confineReader, when it runs as a superuser (no other role may), takes
// EXECUTE on the functions of beyondTransaction from PUBLIC in this
// database and gives it to the role Owner+"_functions" (created without
// login), of which it makes every other role a member, in the same
// transaction: every role that is not a superuser, not predefined (pg_*),
// not a role of an embedkit analytics installation (marked by a comment on
// the role) and not one the reader or the owner belongs to. The host's
// roles, embedkit's store and cluster among them, keep what they had, and
// a membership never stops a DROP ROLE. A role created later becomes a
// member at the next SetupPostgres. It also bounds the reader's temporary
// files. Without a superuser it changes nothing: NewPostgresSQLTool then
// refuses a reader that can still execute one of those functions.
func confineReader(ctx context.Context, tx *sql.Tx, cfg PostgresConfig) error {
	var super bool
	if err := tx.QueryRowContext(ctx, "SELECT rolsuper FROM pg_roles WHERE rolname = current_user").Scan(&super); err != nil || !super {
		return err
	}
	column := func(q string, args ...any) ([]string, error) {
		rows, err := tx.QueryContext(ctx, q, args...)
		if err != nil {
			return nil, err
		}
		var out []string
		for rows.Next() {
			var v string
			if err := rows.Scan(&v); err != nil {
				rows.Close()
				return nil, err
			}
			out = append(out, v)
		}
		return out, rows.Close()
	}
	fns, err := column(`SELECT 'pg_catalog.' || p.oid::regprocedure::text FROM pg_proc p
		WHERE p.pronamespace = 'pg_catalog'::regnamespace AND p.proname = ANY($1)`, revokedFunctions)
	if err != nil {
		return err
	}
	group := functionsRole(cfg)
	if len(group) > 63 || group == cfg.Owner || group == cfg.Reader {
		return fmt.Errorf("the role %q, which keeps those functions for the other roles, is not a name of its own: give the owner a name of at most 53 bytes", group)
	}
	if err := retryRoleRace(ctx, tx, func() error { return createGroup(ctx, tx, group) }); err != nil {
		return err
	}
	fnList := strings.Join(fns, ", ")
	stmts := []string{
		fmt.Sprintf("COMMENT ON ROLE %s IS %s", quoteIdent(cfg.Owner), quoteLiteral(roleMark+"owner")),
		fmt.Sprintf("COMMENT ON ROLE %s IS %s", quoteIdent(cfg.Reader), quoteLiteral(roleMark+"reader")),
		// From the setup's own roles too: an earlier grant may name them.
		fmt.Sprintf("REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC, %s, %s", fnList, quoteIdent(cfg.Owner), quoteIdent(cfg.Reader)),
		fmt.Sprintf("GRANT EXECUTE ON FUNCTION %s TO %s", fnList, quoteIdent(group)),
		fmt.Sprintf("ALTER ROLE %s SET temp_file_limit = %s", quoteIdent(cfg.Reader), quoteLiteral(readerTempFileLimit)),
		// Every user's queries run as the reader, and pg_stat_activity
		// shows a role the SQL its other sessions run, literals and all:
		// the reader's sessions report none.
		fmt.Sprintf("ALTER ROLE %s SET track_activities = off", quoteIdent(cfg.Reader)),
	}
	for _, q := range stmts {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", firstLine(q), err)
		}
	}
	// What a setup gave a role the reader belongs to (the reader would
	// inherit it) is taken back: a membership of a functions role, or the
	// functions themselves (given to a role without INHERIT).
	err = retryRoleRace(ctx, tx, func() error {
		undo, err := column(`SELECT format('REVOKE %I FROM %I', g.rolname, m.rolname)
			FROM pg_auth_members am JOIN pg_roles g ON g.oid = am.roleid JOIN pg_roles m ON m.oid = am.member
			WHERE shobj_description(g.oid, 'pg_authid') = $1 AND pg_has_role($2, m.oid, 'MEMBER')
			UNION ALL
			SELECT format('REVOKE EXECUTE ON FUNCTION %s FROM %I', $3::text, m.rolname) FROM pg_roles m
			WHERE NOT m.rolsuper AND m.rolname !~ '^pg_' AND pg_has_role($2, m.oid, 'MEMBER')
			AND coalesce(shobj_description(m.oid, 'pg_authid'), '') <> $1`, roleMark+"functions", cfg.Reader, fnList)
		if err != nil {
			return err
		}
		for _, q := range undo {
			if _, err := tx.ExecContext(ctx, q); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("take back what the reader would inherit: %w", err)
	}
	// The others: not superusers, not predefined, not embedkit's, not a
	// role an embedkit reader or this owner belongs to, nor one the group
	// belongs to, nor a member of it already. A role without INHERIT
	// would not use a membership: it gets the functions themselves.
	return retryRoleRace(ctx, tx, func() error {
		others, err := column(`SELECT CASE WHEN r.rolinherit THEN 'm' ELSE 'g' END || quote_ident(r.rolname) FROM pg_roles r
			WHERE r.rolname !~ '^pg_' AND NOT r.rolsuper
			AND coalesce(shobj_description(r.oid, 'pg_authid'), '') NOT LIKE $1 || '%'
			AND NOT EXISTS (SELECT FROM pg_roles x WHERE shobj_description(x.oid, 'pg_authid') = $1 || 'reader' AND pg_has_role(x.oid, r.oid, 'MEMBER'))
			AND NOT pg_has_role($2, r.oid, 'MEMBER') AND NOT pg_has_role($3, r.oid, 'MEMBER')
			AND NOT pg_has_role(r.oid, $3, 'USAGE')`,
			roleMark, cfg.Owner, group)
		if err != nil {
			return err
		}
		var members, direct []string
		for _, o := range others {
			if o[0] == 'm' {
				members = append(members, o[1:])
			} else {
				direct = append(direct, o[1:])
			}
		}
		if len(members) > 0 {
			if _, err := tx.ExecContext(ctx, fmt.Sprintf("GRANT %s TO %s", quoteIdent(group), strings.Join(members, ", "))); err != nil {
				return err
			}
		}
		if len(direct) > 0 {
			if _, err := tx.ExecContext(ctx, fmt.Sprintf("GRANT EXECUTE ON FUNCTION %s TO %s", fnList, strings.Join(direct, ", "))); err != nil {
				return err
			}
		}
		return nil
	})
}

// createGroup creates the role group without login, or finds the one an
// earlier setup created; a role of that name that is not embedkit's is an
// error, never adopted.
func createGroup(ctx context.Context, tx *sql.Tx, group string) error {
	var login bool
	var mark string
	err := tx.QueryRowContext(ctx, "SELECT rolcanlogin, coalesce(shobj_description(oid, 'pg_authid'), '') FROM pg_roles WHERE rolname = $1", group).Scan(&login, &mark)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		if _, err := tx.ExecContext(ctx, "CREATE ROLE "+quoteIdent(group)+" NOLOGIN"); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, fmt.Sprintf("COMMENT ON ROLE %s IS %s", quoteIdent(group), quoteLiteral(roleMark+"functions")))
		return err
	case err != nil:
		return err
	case login || mark != roleMark+"functions":
		return fmt.Errorf("a role %q exists and is not embedkit's: give the analytics another owner name", group)
	}
	return nil
}

// retryRoleRace runs f from a savepoint, again (a few times) when another
// session created or dropped a role meanwhile: roles are shared by the
// whole server, and the setup's lock holds only in its own database.
func retryRoleRace(ctx context.Context, tx *sql.Tx, f func() error) error {
	for attempt := 1; ; attempt++ {
		if _, err := tx.ExecContext(ctx, "SAVEPOINT embedkit_roles"); err != nil {
			return err
		}
		err := f()
		if err == nil {
			_, err = tx.ExecContext(ctx, "RELEASE SAVEPOINT embedkit_roles")
			return err
		}
		if _, rerr := tx.ExecContext(ctx, "ROLLBACK TO SAVEPOINT embedkit_roles"); rerr != nil {
			return rerr
		}
		pe, ok := errors.AsType[*pgconn.PgError](err)
		// Not found, or created by another session meanwhile (a unique
		// index, or CREATE ROLE's own "already exists").
		if !ok || (pe.Code != "42704" && pe.Code != "23505" && pe.Code != "42710") || attempt == 5 {
			return err
		}
	}
}

// functionsRole names the role that holds what SetupPostgres takes from
// PUBLIC, for the other roles.
func functionsRole(cfg PostgresConfig) string { return cfg.Owner + "_functions" }

// roleMark starts the comment SetupPostgres puts on its roles, which are
// never granted what it revokes from PUBLIC.
const roleMark = "embedkit analytics "

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

// quoteIdent quotes an SQL identifier.
func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// quoteLiteral quotes an SQL string literal.
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// postgres is the PostgreSQL side of an SQLTool.
type postgres struct {
	cfg PostgresConfig
}

// NewPostgresSQLTool returns the svcSqlApi executor over the views that
// [SetupPostgres] created for m. db must log in as cfg's reader role
// through github.com/jackc/pgx/v5/stdlib; NewPostgresSQLTool returns an
// error when it does not, when the reader can read a table behind a view
// by itself, or when the views are missing.
//
// Each query runs in a transaction of its own: the tool records the
// user's access for the transaction (a function only the tool can call
// before the transaction turns read-only), makes it read-only and sets
// statement_timeout, then runs the query, which must be one statement
// that returns rows, and rolls back. Row access is enforced by PostgreSQL's
// privileges: the reader can read the model's views and nothing else, and
// nothing the query does (set_config, SET ROLE, another spelling of a
// name) changes the access the views read.
func NewPostgresSQLTool(db *sql.DB, m *Model, cfg PostgresConfig, opts ...SQLOption) (*SQLTool, error) {
	if db == nil {
		panic("analytics: NewPostgresSQLTool: db must not be nil, got nil")
	}
	if msg := m.check(); msg != "" {
		panic("analytics: NewPostgresSQLTool: invalid model: " + msg)
	}
	t := newTool(db, m, opts)
	t.pg = &postgres{cfg: cfg.withDefaults()}
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	conn, pc, err := t.pgConn(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	var user string
	if err := pc.QueryRow(ctx, "SELECT session_user").Scan(&user); err != nil {
		return nil, fmt.Errorf("analytics: connect: %w", err)
	}
	if user != t.pg.cfg.Reader {
		return nil, fmt.Errorf("analytics: NewPostgresSQLTool: db must log in as the reader role %q, not %q", t.pg.cfg.Reader, user)
	}
	var readable string
	err = pc.QueryRow(ctx, `SELECT coalesce(string_agg(DISTINCT format('%I.%I', n.nspname, c.relname), ', '), '')
		FROM pg_depend d JOIN pg_rewrite r ON r.oid = d.objid
		JOIN pg_class c ON c.oid = d.refobjid JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE r.ev_class IN (SELECT oid FROM pg_class WHERE relnamespace = $1::text::regnamespace)
		AND c.relkind IN ('r', 'v', 'm', 'p', 'f') AND (n.nspname <> $1::text OR c.relname LIKE 'embedkit\_%')
		AND has_table_privilege(c.oid, 'SELECT')`, t.pg.cfg.Schema).Scan(&readable)
	if err != nil {
		return nil, fmt.Errorf("analytics: check the reader role: %w", err)
	}
	if readable != "" {
		return nil, fmt.Errorf("analytics: NewPostgresSQLTool: the reader role %q can read %s by itself; revoke it", t.pg.cfg.Reader, readable)
	}
	var reach string
	err = pc.QueryRow(ctx, `SELECT coalesce(string_agg(p.oid::regprocedure::text, ', ' ORDER BY p.oid::regprocedure::text), '')
		FROM pg_proc p WHERE (p.pronamespace = 'pg_catalog'::regnamespace AND p.proname = ANY($1) OR p.probin = ANY($2))
		AND has_function_privilege(p.oid, 'EXECUTE')`, revokedFunctions, extensionLibraries).Scan(&reach)
	if err != nil {
		return nil, fmt.Errorf("analytics: check the reader role: %w", err)
	}
	if reach != "" {
		return nil, fmt.Errorf("analytics: NewPostgresSQLTool: the reader role %q can execute %s, whose effects outlive its query's transaction or reach other sessions, or which nothing interrupts; "+
			"revoke EXECUTE on them from PUBLIC as a superuser (SetupPostgres does when it runs as one; see docs/analytics-tools.md)", t.pg.cfg.Reader, reach)
	}
	// Settings only a superuser changes, so that no query undoes them:
	// without them every user's query would read the SQL of the others'
	// (pg_stat_activity), or fill the disk.
	var activities, tempFiles string
	if err := pc.QueryRow(ctx, "SELECT current_setting('track_activities'), current_setting('temp_file_limit')").Scan(&activities, &tempFiles); err != nil {
		return nil, fmt.Errorf("analytics: check the reader role: %w", err)
	}
	if activities != "off" || tempFiles == "-1" {
		return nil, fmt.Errorf("analytics: NewPostgresSQLTool: the reader role %q has track_activities %s and temp_file_limit %s; "+
			"as a superuser: ALTER ROLE %s SET track_activities = off; ALTER ROLE %s SET temp_file_limit = '%s' "+
			"(SetupPostgres does when it runs as one; a session opened before sees the change once it reconnects)",
			t.pg.cfg.Reader, activities, tempFiles, quoteIdent(t.pg.cfg.Reader), quoteIdent(t.pg.cfg.Reader), readerTempFileLimit)
	}
	for _, v := range m.Views {
		var ok bool
		if err := pc.QueryRow(ctx, "SELECT has_table_privilege(format('%I.%I', $1::text, $2::text), 'SELECT')", t.pg.cfg.Schema, v.Name).Scan(&ok); err != nil || !ok {
			return nil, fmt.Errorf("analytics: NewPostgresSQLTool: the view %q is missing or not readable (run SetupPostgres): %v", v.Name, err)
		}
	}
	return t, nil
}

// pgConn takes a connection of the tool's pool.
func (t *SQLTool) pgConn(ctx context.Context) (*sql.Conn, *pgx.Conn, error) {
	conn, err := t.db.Conn(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("analytics: connect: %w: %w", chatstream.ErrSourceUnavailable, err)
	}
	var pc *pgx.Conn
	err = conn.Raw(func(dc any) error {
		c, ok := dc.(*stdlib.Conn)
		if !ok {
			return fmt.Errorf("analytics: NewPostgresSQLTool supports PostgreSQL through github.com/jackc/pgx/v5/stdlib only, not %T", dc)
		}
		pc = c.Conn()
		return nil
	})
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	// A row larger than this fails instead of being read into memory.
	pc.PgConn().Frontend().SetMaxBodyLen(maxPostgresRowBytes)
	return conn, pc, nil
}

// sourcePrefix begins the name of the view of a model's view's SQL, which
// the model's view filters.
const sourcePrefix = "embedkit_source_"

// accessJSON encodes a for embedkit_begin: filterKey → values as text;
// the key "" stands for every row.
func accessJSON(a Access) string {
	m := map[string][]string{}
	if a.all {
		m[""] = []string{""}
	}
	for key, vals := range a.values {
		list := []string{}
		for _, v := range vals {
			switch v := v.(type) {
			case string:
				list = append(list, v)
			case float64:
				list = append(list, strconv.FormatFloat(v, 'f', -1, 64))
			}
		}
		m[key] = list
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// openPostgres runs q in a read-only transaction of the reader role with
// the access a, and returns its cursor.
func (t *SQLTool) openPostgres(ctx context.Context, cancel context.CancelFunc, timeout time.Duration, _ int64, q string, a Access) (cursor, error) {
	conn, pc, err := t.pgConn(ctx)
	if err != nil {
		return nil, t.ctxOr(ctx, err)
	}
	c := &pgCursor{t: t, conn: conn, pc: pc, ctx: ctx, cancel: cancel, timeout: timeout}
	// Until the query is sent, a failure is the database's, whatever the
	// time: running out of it while connecting or opening the transaction
	// means the database did not answer (503 at the data query API), not
	// that the query ran long.
	setupFailed := func(err error) (cursor, error) {
		c.close()
		return nil, t.ctxOr(ctx, fmt.Errorf("analytics: PostgreSQL: %w: %w", chatstream.ErrSourceUnavailable, err))
	}
	if _, err := pc.Exec(ctx, "BEGIN"); err != nil {
		return setupFailed(err)
	}
	c.inTx = true
	// Sent as a parameter whatever the pool's default_query_exec_mode: in
	// the simple protocol pgx would write the values into the statement's
	// text, which pg_stat_activity shows every session of the reader.
	if _, err := pc.Exec(ctx, fmt.Sprintf("SELECT %s.embedkit_begin($1::jsonb)", quoteIdent(t.pg.cfg.Schema)), pgx.QueryExecModeExec, accessJSON(a)); err != nil {
		return setupFailed(err)
	}
	ms := max(timeout.Milliseconds(), 1)
	if _, err := pc.Exec(ctx, fmt.Sprintf("SET TRANSACTION READ ONLY; SET LOCAL statement_timeout = %d; SET LOCAL search_path = %s, pg_catalog",
		ms, quoteIdent(t.pg.cfg.Schema))); err != nil {
		return setupFailed(err)
	}
	sd, err := pc.PgConn().Prepare(ctx, "", q, nil)
	switch {
	case err != nil:
		err = c.translate(err, true)
		c.close()
		return nil, err
	case len(sd.Fields) == 0:
		c.close()
		return nil, toolErr("only a single read-only SELECT statement is allowed")
	case len(sd.ParamOIDs) > 0:
		c.close()
		return nil, toolErr("the query has parameters; write the values into it")
	case len(sd.Fields) == 1 && sd.Fields[0].Name == "QUERY PLAN" && sd.Fields[0].TableOID == 0:
		// EXPLAIN ANALYZE would count the rows the filters remove.
		c.close()
		return nil, toolErr("EXPLAIN is not allowed; send a single SELECT")
	}
	if err := c.refuseXMLTable(q); err != nil {
		c.close()
		return nil, err
	}
	for _, f := range sd.Fields {
		c.cols = append(c.cols, f.Name)
		c.oids = append(c.oids, f.DataTypeOID)
	}
	c.vals = make([]any, len(c.cols))
	// Cancellation and the timeout stop the statement at once.
	c.closing.stop = context.AfterFunc(ctx, c.interrupt)
	// Parsed again: the plan's EXPLAIN took the unnamed statement.
	c.rr = pc.PgConn().ExecParams(ctx, q, nil, nil, nil, nil)
	return c, nil
}

// refuseXMLTable refuses q when its plan runs XMLTABLE, whose XPath
// libxml2 evaluates without checking PostgreSQL's interrupts (see
// uninterruptible): XMLTABLE is syntax, not a function whose EXECUTE can be
// revoked, so the plan says whether q runs it, whatever q's spelling. The
// plan is made without running q (EXPLAIN without ANALYZE), under the
// query's timeout; a statement that cannot be explained returns no rows
// of a SELECT.
func (c *pgCursor) refuseXMLTable(q string) error {
	res := c.pc.PgConn().ExecParams(c.ctx, "EXPLAIN (FORMAT JSON) "+q, nil, nil, nil, nil).Read()
	if res.Err != nil {
		var pe *pgconn.PgError
		if errors.As(res.Err, &pe) && pe.Code == "42601" { // syntax_error: SHOW, for one
			return toolErr("only a single read-only SELECT statement is allowed")
		}
		// Planning folds constants: 1/0 fails here, as the query would.
		return c.translate(res.Err, false)
	}
	if len(res.Rows) != 1 || len(res.Rows[0]) != 1 {
		return fmt.Errorf("analytics: PostgreSQL: EXPLAIN returned %d rows", len(res.Rows))
	}
	xml, err := xmlTablePlanned(res.Rows[0][0])
	if err != nil {
		return fmt.Errorf("analytics: PostgreSQL: EXPLAIN: %w", err)
	}
	if xml {
		return toolErr("XMLTABLE is not allowed: PostgreSQL cannot stop its XPath at the timeout")
	}
	return nil
}

// xmlTablePlanned reports whether a plan of EXPLAIN (FORMAT JSON) holds a
// table function scan other than JSON_TABLE's (jsonpath checks for
// interrupts), at any depth: subplans, CTEs and InitPlans included. It
// reads the plan as tokens, holding none of it: the plan of a query of
// many branches can be large. Only the values of the two keys count, and a
// query names no key.
func xmlTablePlanned(plan []byte) (bool, error) {
	dec := json.NewDecoder(bytes.NewReader(plan))
	scans, jsonTables := 0, 0
	key, isKey := "", false // the last key read, and whether the next string is one
	var inObject []bool
	for {
		tok, err := dec.Token()
		if err == io.EOF && len(inObject) == 0 {
			return scans > jsonTables, nil
		}
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		if err != nil {
			return false, err
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{':
				inObject = append(inObject, true)
			case '[':
				inObject = append(inObject, false)
			default:
				inObject = inObject[:len(inObject)-1]
			}
			isKey = len(inObject) > 0 && inObject[len(inObject)-1] && (t == '{' || t == '}' || t == ']')
			continue
		case string:
			if isKey {
				key, isKey = t, false
				continue
			}
			switch {
			case key == "Node Type" && t == "Table Function Scan":
				scans++
			case key == "Table Function Name" && t == "json_table":
				jsonTables++
			}
		}
		// A value read: in an object, a key comes next.
		isKey = len(inObject) > 0 && inObject[len(inObject)-1]
		key = ""
	}
}

// pgCursor is a query running in a transaction of the reader role.
type pgCursor struct {
	t       *SQLTool
	conn    *sql.Conn
	pc      *pgx.Conn
	rr      *pgconn.ResultReader
	cols    []string
	oids    []uint32
	vals    []any
	ctx     context.Context
	cancel  context.CancelFunc
	timeout time.Duration
	closing closeGuard
	inTx    bool
	done    bool
	err     error
	// cancelled is set when a cancel request was sent: it may reach the
	// server after the query has ended, so the connection is not reused.
	cancelled atomic.Bool
}

func (c *pgCursor) columns() []string  { return c.cols }
func (c *pgCursor) declared() []string { return nil } // types says it all
func (c *pgCursor) values() []any      { return c.vals }
func (c *pgCursor) failure() error     { return c.err }

func (c *pgCursor) next(read bool, limit int64) bool {
	if c.err != nil || c.done || c.closing.closed {
		return false
	}
	if !c.rr.NextRow() {
		c.done = true
		if _, err := c.rr.Close(); err != nil {
			c.err = c.translate(err, false)
		}
		return false
	}
	if !read {
		return true
	}
	raw := c.rr.Values()
	var n int64
	for _, v := range raw {
		n += int64(len(v)) + 4
	}
	if n > limit {
		c.err = errTooLarge
		return false
	}
	for i, v := range raw {
		c.vals[i] = pgValue(c.oids[i], v)
	}
	return true
}

// pgValue converts a value in PostgreSQL's text format.
func pgValue(oid uint32, v []byte) any {
	if v == nil {
		return nil
	}
	s := string(v)
	switch oid {
	case 16: // bool
		return s == "t"
	case 20, 21, 23, 26: // int8, int2, int4, oid
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			return n
		}
	case 700, 701: // float4, float8
		// "Infinity", "-Infinity" and "NaN" too, as SQLite gives them.
		if f, err := strconv.ParseFloat(s, 64); err == nil {
			return f
		}
	case 1700: // numeric: exact, as PostgreSQL writes it (sum(bigint) is one)
		f, err := strconv.ParseFloat(s, 64)
		switch {
		case err == nil && (math.IsInf(f, 0) || math.IsNaN(f)):
			return f // "Infinity", "-Infinity", "NaN"
		case err != nil:
			// Beyond a float64's range: a reader of JSON would take it for
			// an infinity (or 0); its digits as text, as before.
			return s
		}
		return json.Number(s)
	}
	return s
}

// types names the columns' types where PostgreSQL says more than the
// values: dates and timestamps are time.
func (c *pgCursor) types() []string {
	out := make([]string, len(c.oids))
	for i, oid := range c.oids {
		switch oid {
		case 1082, 1114, 1184: // date, timestamp, timestamptz
			out[i] = "time"
		case 16:
			out[i] = "boolean"
		case 20, 21, 23, 26, 700, 701, 1700:
			out[i] = "number"
		default:
			out[i] = "string"
		}
	}
	return out
}

func (c *pgCursor) interrupt() {
	c.closing.ifOpen(func() {
		c.cancelled.Store(true)
		// CancelRequest uses a connection of its own; its own context
		// bounds it.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c.pc.PgConn().CancelRequest(ctx)
	})
}

func (c *pgCursor) close() {
	if c.rr != nil && !c.done {
		c.interrupt()
	}
	if !c.closing.markClosed() {
		return
	}
	if c.rr != nil && !c.done {
		c.rr.Close()
	}
	if c.cancelled.Load() {
		// A late cancel could stop the ROLLBACK or the connection's next
		// user: close it (the server rolls back and drops its locks), and
		// the pool drops it.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		c.pc.PgConn().Close(ctx)
		cancel()
	} else if c.inTx && !c.pc.PgConn().IsClosed() {
		// Nothing of the query outlives its transaction (the reader can
		// take no advisory lock): roll it back. A connection that cannot be
		// reset leaves the pool.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := c.pc.Exec(ctx, "ROLLBACK")
		cancel()
		if err != nil {
			c.conn.Raw(func(any) error { return driver.ErrBadConn })
		}
	}
	c.conn.Close()
	c.cancel()
}

// translate turns an error of PostgreSQL into what the caller sees; compile
// is true before the query runs.
func (c *pgCursor) translate(err error, compile bool) error {
	ctx := c.ctx
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return toolErr("the query ran longer than %s and was stopped", c.timeout)
	case ctx.Err() != nil:
		return ctx.Err()
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		if strings.Contains(err.Error(), "invalid body length") {
			return errRowTooLarge
		}
		return fmt.Errorf("analytics: PostgreSQL: %w", err)
	}
	switch c := pe.Code; {
	case strings.HasPrefix(c, "08"), strings.HasPrefix(c, "58"), c == "XX001", c == "XX002", c == "53300", c == "57P01", c == "57P02", c == "57P03":
		// A fault of the database, not of the query (connection lost,
		// too many connections, shut down, system error, data or index
		// corrupted): the data query API answers it 503, not 400 with its
		// text. Not XX000, an internal error that a query can provoke
		// (array_in with a type that does not exist).
		return fmt.Errorf("analytics: PostgreSQL: %w", err)
	}
	switch pe.Code {
	case "57014": // query_canceled: statement_timeout
		return toolErr("the query ran longer than %s and was stopped", c.timeout)
	case "42501": // insufficient_privilege
		if fn, ok := strings.CutPrefix(pe.Message, "permission denied for function "); ok {
			return toolErr("the query may not call the function %s", fn)
		}
		return toolErr("the query may read only the views of the data model (%s)", c.t.modelViews())
	case "25006", "55000": // read_only_sql_transaction; object_not_in_prerequisite_state: a write through a view that is not updatable
		return toolErr("only a single read-only SELECT statement is allowed")
	case "42601": // syntax_error
		if strings.Contains(pe.Message, "multiple commands") {
			return toolErr("sqlQuery holds more than one statement; send a single SELECT")
		}
	}
	// A view of the model reads its source view, embedkit_source_<name>:
	// a message that names it names the model's view instead.
	msg := strings.ReplaceAll(pe.Message, sourcePrefix, "")
	if compile || strings.HasPrefix(pe.Code, "42") {
		return toolErr("the query is not valid SQL: %s", msg)
	}
	return toolErr("the query failed: %s", msg)
}
