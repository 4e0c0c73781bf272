package llmagent

import (
	"fmt"
	"log/slog"
	"net/http"
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

// Option configures an [Agent]. Options are applied by [New] and frozen
// there.
type Option func(*config) error

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
// none, which suits local servers such as Ollama or vLLM; the agent never
// reads OPENAI_API_KEY itself.
func WithAPIKey(key string) Option {
	return func(c *config) error { c.apiKey = key; return nil }
}

// WithHTTPClient sets the HTTP client of the model requests. Default: the
// SDK's client (http.DefaultTransport with a response-header timeout).
// Abort relies on the request's context, so any client works.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *config) error {
		if hc == nil {
			return fmt.Errorf("llmagent: nil HTTP client")
		}
		c.httpClient = hc
		return nil
	}
}

// WithRequestOptions adds options of the OpenAI SDK to every model request,
// for example extra headers or body fields an endpoint needs
// (option.WithJSONSet("max_tokens", 1024) for a server that does not know
// max_completion_tokens). Options that change retries or the base URL are
// overridden by the agent. Default: none.
func WithRequestOptions(opts ...option.RequestOption) Option {
	return func(c *config) error { c.requestOpts = append(c.requestOpts, opts...); return nil }
}

// WithMaxOutputTokens caps the tokens the model may write in one call
// (max_completion_tokens). Default: [DefaultMaxOutputTokens].
func WithMaxOutputTokens(n int64) Option {
	return func(c *config) error {
		if n <= 0 {
			return fmt.Errorf("llmagent: max output tokens must be positive, got %d", n)
		}
		c.maxOutput = n
		return nil
	}
}

// WithContextBudget sets how many tokens, estimated, one model call may
// send: system prompt, tool definitions, history and the turn so far. The
// oldest exchanges of the thread are left out until the call fits; if the
// turn alone does not fit, the results of its earlier tool calls are
// replaced by a note. The estimate counts one token per 4 bytes of text
// (rounded up) plus 4 per message; set the budget below the model's
// context window minus [WithMaxOutputTokens]. Default:
// [DefaultContextBudget].
func WithContextBudget(tokens int) Option {
	return func(c *config) error {
		if tokens < 1000 {
			return fmt.Errorf("llmagent: context budget must be at least 1000 tokens, got %d", tokens)
		}
		c.budget = tokens
		return nil
	}
}

// WithRetryDelay sets the pause before the one retry a turn may make after
// a failed model request. A longer delay asked for by the endpoint
// (retry-after-ms or Retry-After) up to 10 seconds is honoured; a longer
// one means no retry. Default: [DefaultRetryDelay].
func WithRetryDelay(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return fmt.Errorf("llmagent: negative retry delay")
		}
		c.retryDelay = d
		return nil
	}
}

// WithIdleTimeout sets the longest the agent waits for the next piece of a
// model stream (or for its response headers) before it gives the request
// up as failed. Default: [DefaultIdleTimeout].
func WithIdleTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("llmagent: idle timeout must be positive")
		}
		c.idleTimeout = d
		return nil
	}
}

// WithSystemPrompt sets the system prompt, computed for each turn. It
// should describe the data model and the user's context; it must not be
// what restricts the user's rows (the tools do that), so it need not and
// should not list the row-filter values. The agent adds nothing to it.
// Default: [DefaultSystemPrompt].
func WithSystemPrompt(f func(chatstream.Turn) string) Option {
	return func(c *config) error {
		if f == nil {
			return fmt.Errorf("llmagent: nil system prompt")
		}
		c.systemPrompt = f
		return nil
	}
}

// WithLogger sets the logger of usage (one Info record per model call:
// model, tokens, finish reason; one per turn with its totals) and of
// failed model requests (Warn). It never logs the API key, the prompt or
// the answer. Default: slog.Default().
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return fmt.Errorf("llmagent: nil logger")
		}
		c.logger = l
		return nil
	}
}
