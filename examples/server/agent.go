package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/chatstream/analytics"
	"github.com/embedkit/embedkit/chatstream/llmagent"
	"github.com/embedkit/embedkit/examples/demoagent"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
)

// The agents of -agent.
const (
	agentDemo = "demo"
	agentLLM  = "llm"
)

// checkAgent refuses, before anything starts, an -agent the server cannot
// run: an unknown name, or llm without an endpoint or a model. The model
// endpoint is never guessed: no base URL, no language model.
func (o options) checkAgent() error {
	switch o.agent {
	case agentDemo:
		return nil
	case agentLLM:
		var missing []string
		if o.llmBaseURL == "" {
			missing = append(missing, "OPENAI_BASE_URL (the endpoint, e.g. http://127.0.0.1:11434/v1)")
		}
		if strings.TrimSpace(o.llmModel) == "" {
			missing = append(missing, "-llm-model or EMBED_LLM_MODEL (the model name)")
		}
		if len(missing) > 0 {
			return fmt.Errorf("-agent llm needs %s", strings.Join(missing, " and "))
		}
		// llmagent.New panics on a bad base URL: it is checked here, as
		// a flag.
		if err := llmagent.CheckBaseURL(o.llmBaseURL); err != nil {
			return fmt.Errorf("OPENAI_BASE_URL: %w", err)
		}
		return nil
	}
	return fmt.Errorf("-agent must be %q or %q, got %q", agentDemo, agentLLM, o.agent)
}

// newAgent builds the chat agent -agent names. Both answer over the demo
// data set: the demo agent by itself, the llm agent by giving a language
// model the demo's svcMeta and svcSqlApi executors, which enforce the
// user's row filter whatever SQL the model writes. close releases the
// data set.
func newAgent(o options, log *slog.Logger) (agent chatstream.Agent, close func() error, err error) {
	if err := o.checkAgent(); err != nil {
		return nil, nil, err
	}
	delay := o.agentDelay
	if o.agent == agentLLM {
		delay = 0 // the model sets the pace
	}
	dataOpts, closeData, err := demoData(o.db, log)
	if err != nil {
		return nil, nil, fmt.Errorf("demo data: %w", err)
	}
	demo, err := demoagent.New(append(dataOpts, demoagent.WithDelay(delay))...)
	if err != nil {
		closeData()
		return nil, nil, fmt.Errorf("demo agent: %w", err)
	}
	closeAll := func() error { return errors.Join(demo.Close(), closeData()) }
	if o.agent == agentDemo {
		return demo, closeAll, nil
	}
	meta, sql := demo.Tools()
	model := demo.DataModel()
	opts := []llmagent.Option{
		llmagent.WithLogger(log),
		llmagent.WithSystemPrompt(func(t chatstream.Turn) string { return systemPrompt(model, t, time.Now()) }),
	}
	if o.llmAPIKey != "" { // a local server (Ollama, vLLM) needs none
		opts = append(opts, llmagent.WithAPIKey(o.llmAPIKey))
	}
	llm := llmagent.New(o.llmBaseURL, o.llmModel, []llmagent.Tool{meta, sql}, opts...)
	endpoint := "?"
	if u, err := url.Parse(o.llmBaseURL); err == nil {
		endpoint = u.Redacted() // no password of the URL in the log
	}
	log.Info("chat agent: language model", "model", o.llmModel, "endpoint", endpoint)
	if o.llmAPIKey == "" {
		// Right for a local server; a hosted endpoint answers 401 to every
		// turn, which the user sees only as an answer that failed.
		log.Warn("chat agent: OPENAI_API_KEY is not set: requests to the model carry no Authorization")
	}
	return llm, func() error { return errors.Join(llm.Close(), closeAll()) }, nil
}

// envAnalyticsSchema names the PostgreSQL schema of the analytics views
// (default embedkit_analytics); the roles are named after it, with
// _owner and _reader. Roles are shared by the whole PostgreSQL server,
// so servers of different databases on one PostgreSQL server, and tests,
// give their own.
const envAnalyticsSchema = "EMBED_ANALYTICS_SCHEMA"

// demoData returns the demo agent's options for the database of -db. On
// PostgreSQL the sample data set is loaded into the schema embedkit_demo
// of that database (once: a restart, or another replica starting at the
// same time, finds it there), the analytics views and roles are set up,
// and the tools run there as the reader role, which logs in with the
// DSN's host and database and no password (trust or peer
// authentication; give the role a password and a pg_hba rule otherwise).
// On SQLite the demo agent keeps its data set in memory. release closes
// what demoData opened.
func demoData(db string, log *slog.Logger) (opts []demoagent.Option, release func() error, err error) {
	if !isPostgres(db) {
		return nil, func() error { return nil }, nil
	}
	schema := envOr(envAnalyticsSchema, "embedkit_analytics")
	cfg := analytics.PostgresConfig{Schema: schema, Owner: schema + "_owner", Reader: schema + "_reader"}
	admin, err := sql.Open("pgx", db)
	if err != nil {
		return nil, nil, err
	}
	defer admin.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := demoagent.SetupPostgres(ctx, admin, cfg); err != nil {
		return nil, nil, err
	}
	reader, err := sql.Open("pgx", readerDSN(db, cfg.Reader))
	if err != nil {
		return nil, nil, err
	}
	reader.SetMaxOpenConns(16)
	reader.SetMaxIdleConns(16)
	log.Info("demo data: PostgreSQL", "data", demoagent.PostgresSchema, "views", cfg.Schema, "reader", cfg.Reader)
	return []demoagent.Option{demoagent.WithPostgres(reader, cfg)}, reader.Close, nil
}

// readerDSN is dsn logging in as role, without a password.
func readerDSN(dsn, role string) string {
	if u, err := url.Parse(dsn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		u.User = url.User(role)
		return u.String()
	}
	// A keyword/value DSN: a later keyword overrides an earlier one.
	return dsn + " user=" + role + " password=''"
}

// systemPrompt tells the model its rules, today's date, the demo data
// model and who asks. The user's row access is stated as a fact the data
// layer enforces; the model cannot change it.
func systemPrompt(m *analytics.Model, t chatstream.Turn, now time.Time) string {
	var b strings.Builder
	b.WriteString(llmagent.Guidelines)
	b.WriteString("The data is a sample shop: customers, products and their orders. ")
	b.WriteString("Write SQL for the views below only; when a chart helps, pass a Vega-Lite v5 spec without data as vegaSpec.\n")
	b.WriteString(llmagent.Today(now))
	b.WriteString("\n\n")
	b.WriteString(m.Describe())
	b.WriteString("\n")
	b.WriteString(m.UserContext(t))
	b.WriteString(llmagent.DisplayName(t.User))
	if t.ActiveBranchName != "" && !t.IsDefaultBranch {
		fmt.Fprintf(&b, " Queries run on the development branch %q.", t.ActiveBranchName)
	}
	return b.String()
}

// llmEnv reads the model endpoint and key from the environment of the
// OpenAI SDKs.
func llmEnv() (baseURL, apiKey string) {
	return os.Getenv("OPENAI_BASE_URL"), os.Getenv("OPENAI_API_KEY")
}
