package llmagent

import (
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"time"

	"github.com/openai/openai-go/v3/option"

	"github.com/embedkit/embedkit/chatstream"
)

// Defaults of the options.
const (
	// DefaultMaxOutputTokens is the default cap on the tokens the model may
	// write in one call ([WithMaxOutputTokens]).
	DefaultMaxOutputTokens = 2048
	// DefaultContextBudget is the default budget, in estimated tokens, of
	// everything sent to the model in one call ([WithContextBudget]).
	DefaultContextBudget = 24000
	// DefaultRetryDelay is the default pause before the one retry of a
	// failed model request ([WithRetryDelay]).
	DefaultRetryDelay = 500 * time.Millisecond
	// DefaultIdleTimeout is the default longest silence of a model stream
	// ([WithIdleTimeout]).
	DefaultIdleTimeout = 60 * time.Second
	// MaxToolRounds is the number of model calls of one turn that may call
	// tools. A turn whose model still asks for tools after that many rounds
	// gets one last call in which tools are refused, to write its answer.
	MaxToolRounds = 8
	// maxRetryAfter is the longest Retry-After an endpoint may ask for and
	// still get its retry; beyond it the turn fails at once.
	maxRetryAfter = 10 * time.Second
)

// Option configures an [Agent] at [New]. An invalid value (see each
// option) panics when its With function is called, so a misconfigured
// agent fails at start-up with a message naming the option.
//
// How to add an option: write a With function that checks its argument
// first and panics with "llmagent: WithX: <what is wrong>, got <value>"
// when it is invalid, then returns an Option setting a field of config.
// Its doc comment states the default and the valid range; add a row to
// TestInvalidOptionsPanic.
type Option func(*config)

type config struct {
	apiKey       string
	httpClient   *http.Client
	requestOpts  []option.RequestOption
	maxOutput    int64
	budget       int
	retryDelay   time.Duration
	idleTimeout  time.Duration
	systemPrompt func(chatstream.Turn) string
	logger       *slog.Logger
}

// WithAPIKey sets the key sent as "Authorization: Bearer <key>". Default:
// none (leave the option out), which suits local servers such as Ollama or
// vLLM; the agent never reads OPENAI_API_KEY itself. key must not be
// empty; WithAPIKey panics otherwise.
func WithAPIKey(key string) Option {
	if key == "" {
		panic(`llmagent: WithAPIKey: key must not be empty, got "" (leave the option out to send none)`)
	}
	return func(c *config) { c.apiKey = key }
}

// WithHTTPClient sets the HTTP client of the model requests. Default: a
// client of the agent's own, on a clone of http.DefaultTransport, whose
// idle connections [Agent.Close] closes.
// Abort relies on the request's context, so any client works. hc must not
// be nil; WithHTTPClient panics otherwise.
func WithHTTPClient(hc *http.Client) Option {
	if hc == nil {
		panic("llmagent: WithHTTPClient: client must not be nil, got nil")
	}
	return func(c *config) { c.httpClient = hc }
}

// WithRequestOptions adds options of the OpenAI SDK to every model request,
// for example extra headers or body fields an endpoint needs
// (option.WithJSONSet("max_tokens", 1024) for a server that does not know
// max_completion_tokens). Options that change retries or the base URL are
// overridden by the agent. Default: none. No option may be nil;
// WithRequestOptions panics otherwise.
func WithRequestOptions(opts ...option.RequestOption) Option {
	for i, o := range opts {
		if o == nil {
			panic(fmt.Sprintf("llmagent: WithRequestOptions: options must not be nil, got nil at index %d", i))
		}
	}
	opts = slices.Clone(opts)
	return func(c *config) { c.requestOpts = append(c.requestOpts, opts...) }
}

// WithMaxOutputTokens caps the tokens the model may write in one call
// (max_completion_tokens). Default: [DefaultMaxOutputTokens] (2048). n
// must be positive; WithMaxOutputTokens panics otherwise.
func WithMaxOutputTokens(n int64) Option {
	if n <= 0 {
		panic(fmt.Sprintf("llmagent: WithMaxOutputTokens: count must be positive, got %d", n))
	}
	return func(c *config) { c.maxOutput = n }
}

// WithContextBudget sets how many tokens, estimated, one model call may
// send: system prompt, tool definitions, history and the turn so far. The
// oldest exchanges of the thread are left out until the call fits; if the
// turn alone does not fit, the results of its earlier tool calls are
// replaced by a note. The estimate counts one token per 4 bytes of text
// (rounded up) plus 4 per message; set the budget below the model's
// context window minus [WithMaxOutputTokens]. Default:
// [DefaultContextBudget] (24000). tokens must be at least 1000;
// WithContextBudget panics otherwise.
func WithContextBudget(tokens int) Option {
	if tokens < 1000 {
		panic(fmt.Sprintf("llmagent: WithContextBudget: budget must be at least 1000 tokens, got %d", tokens))
	}
	return func(c *config) { c.budget = tokens }
}

// WithRetryDelay sets the pause before the one retry a turn may make after
// a failed model request. A longer delay asked for by the endpoint
// (retry-after-ms or Retry-After) up to 10 seconds is honoured; a longer
// one means no retry. Default: [DefaultRetryDelay] (500ms). d must not be
// negative (0 retries at once); WithRetryDelay panics otherwise.
func WithRetryDelay(d time.Duration) Option {
	if d < 0 {
		panic(fmt.Sprintf("llmagent: WithRetryDelay: duration must not be negative, got %v", d))
	}
	return func(c *config) { c.retryDelay = d }
}

// WithIdleTimeout sets the longest the agent waits for the next bytes of a
// model stream (or for its response headers) before it gives the request
// up as failed; SSE comments, which some endpoints send to keep a slow
// stream open, count. Default: [DefaultIdleTimeout] (60s). d must be positive;
// WithIdleTimeout panics otherwise.
func WithIdleTimeout(d time.Duration) Option {
	if d <= 0 {
		panic(fmt.Sprintf("llmagent: WithIdleTimeout: duration must be positive, got %v", d))
	}
	return func(c *config) { c.idleTimeout = d }
}

// WithSystemPrompt sets the system prompt, computed for each turn. It
// should describe the data model and the user's context; it must not be
// what restricts the user's rows (the tools do that), so it need not and
// should not list the row-filter values. The agent adds nothing to it.
// Default: [DefaultSystemPrompt]. f must not be nil; WithSystemPrompt
// panics otherwise.
func WithSystemPrompt(f func(chatstream.Turn) string) Option {
	if f == nil {
		panic("llmagent: WithSystemPrompt: prompt function must not be nil, got nil (leave the option out for DefaultSystemPrompt)")
	}
	return func(c *config) { c.systemPrompt = f }
}

// WithLogger sets the logger of usage (one Info record per model call:
// model, tokens, finish reason; one per turn with its totals) and of
// failed model requests (Warn). It never logs the API key, the prompt or
// the answer. Default: slog.Default(). l must not be nil; WithLogger
// panics otherwise.
func WithLogger(l *slog.Logger) Option {
	if l == nil {
		panic("llmagent: WithLogger: logger must not be nil, got nil (leave the option out for slog.Default())")
	}
	return func(c *config) { c.logger = l }
}
