package main

import (
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
	demo, err := demoagent.New(demoagent.WithDelay(delay))
	if err != nil {
		return nil, nil, fmt.Errorf("demo agent: %w", err)
	}
	if o.agent == agentDemo {
		return demo, demo.Close, nil
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
	return llm, demo.Close, nil
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
