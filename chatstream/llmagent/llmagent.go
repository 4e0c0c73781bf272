package llmagent

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/shared"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/internal/telemetry"
)

// Tool is a function the model may call. The agent offers every tool to
// the model with its name, description and parameters, shows each call in
// the stream as a tool-call message (the model's arguments as
// toolCall.input) and gives the model the result as data in a tool
// message.
type Tool interface {
	// Name is the function name the model calls (1 to 64 characters of
	// a-z A-Z 0-9 _ -), unique among the agent's tools.
	Name() string
	// Description tells the model what the tool does and when to use it.
	Description() string
	// Parameters returns the JSON Schema of the input object.
	Parameters() map[string]any
	// Call runs the tool for turn t with the model's arguments, a JSON
	// value (not always what the schema says: validate it). The result is
	// encoded as JSON for the model and for toolCall.result.
	// err != nil is a tool error result: its message goes to the model and
	// to the stream as {"error": msg}, so it must be fit for both. An
	// error that wraps another (Unwrap) is a failure of the tool itself:
	// the agent logs the wrapped error, which neither sees.
	// Call enforces whatever the user may see (row filters, branches): the
	// model's arguments are untrusted.
	Call(ctx context.Context, t chatstream.Turn, args json.RawMessage) (result any, err error)
}

// Agent is a [chatstream.Agent] that answers with a language model behind
// an OpenAI-compatible Chat Completions endpoint, streaming. It is safe for
// concurrent use by many turns.
type Agent struct {
	client     openai.Client
	model      string
	tools      map[string]Tool
	names      []string // tool names in the order given
	toolParams []openai.ChatCompletionToolUnionParam
	toolTokens int // estimated tokens of the tool definitions
	cfg        config
	own        *http.Client // the agent's own pool (nil: the host's client)
}

var _ chatstream.Agent = (*Agent)(nil)

var toolName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// New returns an agent that streams from the Chat Completions endpoint at
// baseURL (for example "https://api.openai.com/v1" or
// "http://127.0.0.1:11434/v1" for Ollama; "/chat/completions" is appended)
// with the given model, offering it tools. The base URL is required: the
// agent sends nothing anywhere else. The SDK's OPENAI_BASE_URL and
// OPENAI_API_KEY are overridden (pass the key with [WithAPIKey]).
//
// New opens nothing: its arguments are configuration, and an invalid one
// panics, as http.ServeMux.Handle does for a bad pattern: a base URL that
// is not an absolute http or https URL, an empty model name, a nil tool, a
// tool name that is not 1 to 64 characters of a-z A-Z 0-9 _ -, two tools
// of the same name, or tool parameters that do not encode as JSON. A host
// that reads the base URL from its own configuration checks it with
// [CheckBaseURL] first.
func New(baseURL, model string, tools []Tool, opts ...Option) *Agent {
	if err := CheckBaseURL(baseURL); err != nil {
		panic("llmagent: New: " + strings.TrimPrefix(err.Error(), "llmagent: "))
	}
	if strings.TrimSpace(model) == "" {
		panic(fmt.Sprintf("llmagent: New: model must not be empty, got %q", model))
	}
	cfg := config{
		maxOutput:    DefaultMaxOutputTokens,
		budget:       DefaultContextBudget,
		retryDelay:   DefaultRetryDelay,
		idleTimeout:  DefaultIdleTimeout,
		systemPrompt: DefaultSystemPrompt,
		logger:       slog.Default(),
	}
	for _, o := range opts {
		o(&cfg)
	}
	a := &Agent{model: model, tools: make(map[string]Tool, len(tools)), cfg: cfg}
	for i, t := range tools {
		if t == nil {
			panic(fmt.Sprintf("llmagent: New: tools must not be nil, got nil at index %d", i))
		}
		name := t.Name()
		if !toolName.MatchString(name) {
			panic(fmt.Sprintf("llmagent: New: tool name must be 1 to 64 characters of a-z A-Z 0-9 _ -, got %q", name))
		}
		if _, dup := a.tools[name]; dup {
			panic(fmt.Sprintf("llmagent: New: tool names must be unique, got %q twice", name))
		}
		a.tools[name] = t
		a.names = append(a.names, name)
		fd := shared.FunctionDefinitionParam{
			Name:        name,
			Description: param.NewOpt(t.Description()),
			Parameters:  shared.FunctionParameters(t.Parameters()),
		}
		enc, err := json.Marshal(fd)
		if err != nil {
			panic(fmt.Sprintf("llmagent: New: tool parameters must encode as JSON, got %v for tool %q", err, name))
		}
		a.toolTokens += estimate(len(enc))
		a.toolParams = append(a.toolParams, openai.ChatCompletionFunctionTool(fd))
	}
	// The host's SDK options first, then ours, so that the base URL, the
	// key and the retries are always the agent's.
	ro := slices.Clone(cfg.requestOpts)
	hc := cfg.httpClient
	if hc == nil {
		// A pool of the agent's own, which Close empties.
		hc = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
		a.own = hc
	}
	ro = append(ro, option.WithHTTPClient(hc))
	ro = append(ro, option.WithBaseURL(baseURL), option.WithAPIKey(cfg.apiKey), option.WithMaxRetries(0), option.WithMiddleware(boundResponses))
	a.client = openai.NewClient(ro...)
	return a
}

// Close closes the idle connections of the agent's own connection pool
// (one with [WithHTTPClient] is the host's), whose goroutines would
// otherwise live on for the transport's idle timeout. A turn still running
// goes on; Close is for the end of the agent's use. It returns nil.
func (a *Agent) Close() error {
	if a.own != nil {
		a.own.CloseIdleConnections()
	}
	return nil
}

// CheckBaseURL returns an error unless baseURL is an absolute http or
// https URL, the base URL [New] accepts. The error shows the URL without
// its password, query or fragment, which may hold a key.
func CheckBaseURL(baseURL string) error {
	u, err := url.Parse(baseURL)
	if err != nil {
		// Not even the parser's reason: it quotes pieces of the URL (the
		// password, in "invalid port").
		return errors.New("llmagent: base URL must be an absolute http or https URL, got one that does not parse")
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		shown := *u
		if shown.RawQuery != "" || shown.ForceQuery {
			shown.RawQuery, shown.ForceQuery = "...", false
		}
		if shown.Fragment != "" {
			shown.Fragment, shown.RawFragment = "...", ""
		}
		return fmt.Errorf("llmagent: base URL must be an absolute http or https URL, got %q", shown.Redacted())
	}
	return nil
}

// Model returns the model name the agent asks for.
func (a *Agent) Model() string { return a.model }

// Answer runs one turn: it sends the system prompt, the thread's history
// (trimmed to the context budget) and the user's input to the model,
// streams the model's text as content and its reasoning as thinking, runs
// the tools the model calls and sends their results back, for at most
// [MaxToolRounds] rounds. A model request that fails before anything of it
// was streamed is retried once per turn; any other failure ends the turn
// with an error.
func (a *Agent) Answer(ctx context.Context, t chatstream.Turn, e chatstream.Emitter) error {
	tr := &turn{a: a, t: t, e: e}
	defer tr.logTurn(ctx)
	system := msg{role: "system", content: a.cfg.systemPrompt(t)}
	history := historyGroups(t.History)
	cur := []msg{{role: "user", content: t.Input}}
	for round := 0; ; round++ {
		toolsOK := round < MaxToolRounds && len(a.toolParams) > 0
		msgs := a.fit(system, history, cur)
		res, err := tr.call(ctx, msgs, toolsOK, round)
		if err != nil {
			return err
		}
		if len(res.calls) == 0 || !toolsOK {
			// The turn ends with this call: say why when the model's text
			// does not.
			note := finishNote(res.finish)
			switch {
			case note != "":
			case round >= MaxToolRounds && res.content == "":
				note = fmt.Sprintf("I could not finish the analysis within %d rounds of tool calls.", MaxToolRounds)
			case !tr.wrote:
				note = "The model gave no answer."
			}
			if note != "" && tr.wrote {
				note = "\n\n" + note
			}
			if note != "" {
				return e.Content(note)
			}
			return nil
		}
		if res.dropped > 0 {
			tr.a.cfg.logger.LogAttrs(ctx, slog.LevelWarn, "llmagent: the model asked for more tool calls in one response than run",
				slog.String("account", tr.t.AccountName), slog.String("agent", tr.t.AgentID),
				slog.Int("calls", len(res.calls)+res.dropped), slog.Int("run", len(res.calls)))
		}
		cur = append(cur, msg{role: "assistant", content: res.content, calls: res.calls})
		for _, c := range res.calls {
			tr.tools++
			out, err := tr.runTool(ctx, c)
			if err != nil {
				return err
			}
			cur = append(cur, msg{role: "tool", content: out, callID: c.id})
		}
	}
}

// finishNote is what the user is told when the model stopped for a reason
// other than the end of its answer or a tool call.
func finishNote(reason string) string {
	switch reason {
	case "length":
		return "[The answer was cut off at the output limit.]"
	case "content_filter":
		return "[Part of the answer was withheld by the model's content filter.]"
	}
	return ""
}

// turn is the state of one Answer call.
type turn struct {
	a       *Agent
	t       chatstream.Turn
	e       chatstream.Emitter
	retried bool // the turn's one retry is used
	wrote   bool // content was emitted

	// Totals of the turn's model calls, for its usage record.
	calls, tools           int
	promptTok, completeTok int64
}

// logTurn logs the turn's totals: model calls (retries included), tool
// calls and the tokens the endpoint reported.
func (tr *turn) logTurn(ctx context.Context) {
	if tr.calls == 0 {
		return
	}
	tr.a.cfg.logger.LogAttrs(ctx, slog.LevelInfo, "llmagent: turn usage",
		slog.String("account", tr.t.AccountName),
		slog.String("agent", tr.t.AgentID),
		slog.String("model", tr.a.model),
		slog.Int("model_calls", tr.calls),
		slog.Int("tool_calls", tr.tools),
		slog.Int64("prompt_tokens", tr.promptTok),
		slog.Int64("completion_tokens", tr.completeTok))
}

// response is what one model call streamed.
type response struct {
	content  string
	calls    []call
	dropped  int // calls past maxCallsPerResponse, left out
	model    string
	finish   string
	usage    *openai.CompletionUsage
	streamed bool // content or thinking was emitted: no retry
}

// errEmit marks an error of the Emitter: the turn is over.
type errEmit struct{ err error }

func (e *errEmit) Error() string { return e.err.Error() }
func (e *errEmit) Unwrap() error { return e.err }

var (
	errIdle      = errors.New("llmagent: the model stream was silent for too long")
	errTruncated = errors.New("llmagent: the model stream ended without a finish reason")
)

// call makes one model request, retrying it once per turn when it failed
// before streaming anything and the failure may be transient.
func (tr *turn) call(ctx context.Context, msgs []msg, toolsOK bool, round int) (*response, error) {
	a := tr.a
	params := openai.ChatCompletionNewParams{
		Model:               shared.ChatModel(a.model),
		Messages:            toParams(msgs),
		MaxCompletionTokens: param.NewOpt(a.cfg.maxOutput),
		StreamOptions:       openai.ChatCompletionStreamOptionsParam{IncludeUsage: param.NewOpt(true)},
	}
	if len(a.toolParams) > 0 {
		// Tools stay defined once the rounds are used up, so that the
		// endpoint accepts the tool messages of the history, but the model
		// may no longer call them.
		params.Tools = a.toolParams
		if !toolsOK {
			params.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: param.NewOpt("none")}
		}
	}
	for attempt := 1; ; attempt++ {
		start := time.Now()
		// A GenAI "chat" span and the gen_ai.client metrics, on the chat
		// handler's OpenTelemetry providers when the turn runs in one.
		mctx, mc := telemetry.StartModelCall(ctx, "openai", a.model)
		res, err := tr.stream(mctx, params)
		var u telemetry.Usage
		if res != nil {
			u.ResponseModel = res.model
		}
		if res != nil && res.usage != nil {
			u.InputTokens, u.OutputTokens = res.usage.PromptTokens, res.usage.CompletionTokens
		}
		mc.End(u, withoutURL(err))
		tr.logUsage(ctx, round, attempt, res, time.Since(start), err)
		if err == nil {
			return res, nil
		}
		if ee, ok := errors.AsType[*errEmit](err); ok {
			return nil, ee.err
		}
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		wait, ok := retryWait(err, a.cfg.retryDelay)
		if !ok || tr.retried || res.streamed {
			return nil, fmt.Errorf("llmagent: model request failed: %w", withoutURL(err))
		}
		tr.retried = true
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, context.Cause(ctx)
		case <-timer.C:
		}
	}
}

// retryWait says whether err may be transient and how long to wait before
// the retry.
func retryWait(err error, delay time.Duration) (time.Duration, bool) {
	apiErr, ok := errors.AsType[*openai.Error](err)
	if !ok {
		// Connection failures, a cut or silent stream, an error event in
		// the stream.
		return delay, true
	}
	switch s := apiErr.StatusCode; {
	case s == 408 || s == 409 || s == 429 || s >= 500:
	default:
		return 0, false
	}
	if apiErr.Response != nil {
		// OpenAI sends retry-after-ms; the standard header is in seconds.
		for _, h := range []struct {
			name string
			unit time.Duration
		}{{"Retry-After-Ms", time.Millisecond}, {"Retry-After", time.Second}} {
			var n float64
			v := apiErr.Response.Header.Get(h.name)
			if v == "" {
				continue
			}
			if _, err := fmt.Sscan(v, &n); err != nil || !(n >= 0) { // NaN too
				continue // an HTTP date: keep the default delay
			}
			if n*float64(h.unit) > float64(maxRetryAfter) { // compared before the conversion, which overflows
				return 0, false
			}
			return max(time.Duration(n*float64(h.unit)), delay), true
		}
	}
	return delay, true
}

// stream makes one streaming request and emits its text and reasoning as
// they arrive. Tool calls are collected; they are emitted by the caller
// once the request has succeeded.
func (tr *turn) stream(ctx context.Context, params openai.ChatCompletionNewParams) (*response, error) {
	a := tr.a
	res := &response{}
	reqCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	idle := time.AfterFunc(a.cfg.idleTimeout, func() { cancel(errIdle) })
	defer idle.Stop()
	// Silence is no bytes at all: an endpoint that keeps a slow stream
	// open with SSE comments (": keep-alive", which the SDK skips) is not
	// silent.
	heard := option.WithMiddleware(func(r *http.Request, next option.MiddlewareNext) (*http.Response, error) {
		resp, err := next(r)
		if resp != nil && resp.Body != nil {
			resp.Body = &activityBody{ReadCloser: resp.Body, heard: func() { idle.Reset(a.cfg.idleTimeout) }}
		}
		return resp, err
	})

	s := a.client.Chat.Completions.NewStreaming(reqCtx, params, option.WithMaxRetries(0), heard)
	defer s.Close()
	var (
		pending []*call // by index
		earlier []*call // calls an endpoint sent at an index reused since
		content strings.Builder
	)
	for s.Next() {
		ch := s.Current()
		if res.model == "" && len(ch.Model) <= maxToolName {
			res.model = ch.Model // the model that answered, for telemetry
		}
		if ch.JSON.Usage.Valid() {
			u := ch.Usage
			res.usage = &u
		}
		for _, c := range ch.Choices {
			if c.Index != 0 {
				continue
			}
			d := c.Delta
			if r := reasoningOf(d); r != "" {
				res.streamed = true
				if err := tr.e.Thinking(r); err != nil {
					return res, &errEmit{err}
				}
			}
			text, thought := contentOf(d)
			if thought != "" {
				res.streamed = true
				if err := tr.e.Thinking(thought); err != nil {
					return res, &errEmit{err}
				}
			}
			for _, text := range []string{text, stringField(d.JSON.Refusal.Raw(), d.Refusal)} {
				if text == "" {
					continue
				}
				res.streamed = true
				tr.wrote = true
				content.WriteString(text)
				if err := tr.e.Content(text); err != nil {
					return res, &errEmit{err}
				}
			}
			for _, tc := range d.ToolCalls {
				if tc.Index < 0 || tc.Index >= 128 {
					continue
				}
				for int(tc.Index) >= len(pending) {
					pending = append(pending, nil)
				}
				p := pending[tc.Index]
				if p != nil && tc.Function.Name != "" && p.name != "" &&
					(tc.ID != "" && p.id != "" && tc.ID != p.id ||
						tc.ID == "" && (startsObject(tc.Function.Arguments) || tc.Function.Name != p.name) && complete(p.args)) {
					// Another call at the same index: some endpoints send
					// every parallel call at index 0. It has a name, and a
					// new id or, without one, follows a call whose
					// arguments are complete and opens arguments of its
					// own or names another tool (others repeat the name,
					// with empty or null arguments, in a call's last
					// chunk). A new id without a name continues the call:
					// others change the id between the chunks of one call.
					earlier = append(earlier, p)
					p = nil
				}
				if p == nil {
					p = &call{}
					pending[tc.Index] = p
				}
				if tc.ID != "" {
					p.id = tc.ID
				}
				if n := tc.Function.Name; n != "" && n != p.name {
					if len(p.name)+len(n) <= maxToolName {
						p.name += n
					} else {
						p.nameTooLong = true
					}
				}
				if x := strings.TrimSpace(tc.JSON.ExtraFields["extra_content"].Raw()); len(x) > maxToolArgs {
					// Not sent back: an endpoint that needs it (Gemini's
					// thought signature) refuses the next request.
					if !p.extraTooLong {
						p.extraTooLong = true
						tr.a.cfg.logger.LogAttrs(ctx, slog.LevelWarn, "llmagent: a tool call's extra_content is longer than 64 KiB: not sent back",
							slog.String("account", tr.t.AccountName), slog.String("agent", tr.t.AgentID), slog.Int("bytes", len(x)))
					}
				} else if strings.HasPrefix(x, "{") && json.Valid([]byte(x)) {
					p.extra = x
				}
				if a := tc.Function.Arguments; len(p.args)+len(a) <= maxToolArgs {
					p.args += a
				} else {
					p.tooLong = true
				}
			}
			if c.FinishReason != "" {
				res.finish = c.FinishReason
			}
		}
	}
	res.content = content.String()
	if err := s.Err(); err != nil {
		if context.Cause(reqCtx) == errIdle && ctx.Err() == nil {
			return res, errIdle
		}
		return res, streamEventError(err, tr.a.cfg.apiKey)
	}
	if res.finish == "" {
		return res, errTruncated
	}
	ids := map[string]bool{}
	for i, p := range append(earlier, pending...) {
		if p == nil {
			continue
		}
		if len(res.calls) == maxCallsPerResponse {
			res.dropped++
			continue
		}
		// Each call is answered by its id: one the endpoint left out or
		// gave twice gets one of its own, in the form every endpoint
		// accepts (see callID).
		for n := 0; p.id == "" || ids[p.id]; n++ {
			p.id = callID('c', i*100+n)
		}
		ids[p.id] = true
		res.calls = append(res.calls, *p)
	}
	return res, nil
}

// maxCallsPerResponse bounds the tool calls of one model response that
// run: a model that asks for more in one response gets the first ones
// (each a query of up to its timeout) and can ask again in the next round.
const maxCallsPerResponse = 16

// callID returns an id of the agent's own for a tool call: 9 letters and
// digits, the only form Mistral's API (and the chat templates of its
// models on other servers) accepts, which every other endpoint accepts too.
func callID(kind byte, n int) string {
	return fmt.Sprintf("%c%08d", kind, n%100_000_000)
}

// contentOf returns the text and the reasoning of a delta's content. The
// OpenAI API sends content as a string; Mistral's reasoning models send a
// list of parts, {"type": "text", "text": …} and {"type": "thinking",
// "thinking": [{"type": "text", "text": …}]}, which the SDK hands over as
// raw JSON: the text parts are the text, the thinking parts the
// reasoning, and any other part or form is dropped, never shown as JSON.
func contentOf(d openai.ChatCompletionChunkChoiceDelta) (text, thinking string) {
	raw := strings.TrimSpace(d.JSON.Content.Raw())
	if !strings.HasPrefix(raw, "[") {
		return stringField(raw, d.Content), ""
	}
	var parts []contentPart
	if json.Unmarshal([]byte(raw), &parts) != nil {
		return "", ""
	}
	var t, th strings.Builder
	for _, p := range parts {
		switch p.Type {
		case "text":
			t.WriteString(p.Text)
		case "thinking":
			for _, q := range p.Thinking {
				if q.Type == "text" {
					th.WriteString(q.Text)
				}
			}
		}
	}
	return t.String(), th.String()
}

// contentPart is one part of a content list (see contentOf).
type contentPart struct {
	Type     string `json:"type"`
	Text     string `json:"text"`
	Thinking []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"thinking"`
}

// stringField returns s, the SDK's value of a string field whose raw JSON
// is raw, when the endpoint sent a string there (the SDK hands a value of
// another type over as its JSON).
func stringField(raw, s string) string {
	if !strings.HasPrefix(strings.TrimSpace(raw), `"`) {
		return ""
	}
	return s
}

// reasoningOf returns the reasoning text of a delta: the non-standard
// "reasoning_content" (DeepSeek, vLLM) or "reasoning" (Ollama, OpenRouter)
// field, when the endpoint streams one.
func reasoningOf(d openai.ChatCompletionChunkChoiceDelta) string {
	for _, k := range []string{"reasoning_content", "reasoning"} {
		// Extra fields are never Valid() in the SDK: read the raw JSON.
		raw := d.JSON.ExtraFields[k].Raw()
		if raw == "" {
			continue
		}
		var s string
		if json.Unmarshal([]byte(raw), &s) == nil && s != "" {
			return s
		}
	}
	return ""
}

// runTool emits the call, runs it and returns the result for the model.
func (tr *turn) runTool(ctx context.Context, c call) (string, error) {
	args := strings.TrimSpace(c.args)
	if args == "" {
		args = "{}"
	}
	valid := json.Valid([]byte(args))
	var input any = json.RawMessage(args)
	if !valid {
		input = args // shown as a JSON string
	}
	// Only a tool's own name reaches the stream and the telemetry (a span
	// is named after it): what else the model wrote there is told to the
	// model alone.
	tool, ok := tr.a.tools[c.name]
	ok = ok && !c.nameTooLong
	name := c.name
	if !ok {
		name = "unknown"
	}
	tc, err := tr.e.ToolCall(name, input)
	if err != nil {
		return "", err
	}
	var result any
	var terr error
	toModel := ""
	switch {
	case !ok:
		terr = fmt.Errorf("unknown tool; the tools are %s", strings.Join(tr.a.names, ", "))
		toModel = fmt.Sprintf("unknown tool %q; the tools are %s", c.name, strings.Join(tr.a.names, ", "))
	case c.tooLong:
		terr = fmt.Errorf("the arguments are longer than %d KiB", maxToolArgs>>10)
	case !valid:
		terr = errors.New("the arguments are not valid JSON")
	default:
		result, terr = tool.Call(ctx, tr.t, json.RawMessage(args))
		if cause := errors.Unwrap(terr); cause != nil && ctx.Err() == nil {
			// A failure of the tool itself (its database), which the model
			// and the user are told without its details.
			tr.a.cfg.logger.LogAttrs(ctx, slog.LevelWarn, "llmagent: tool failed",
				slog.String("account", tr.t.AccountName), slog.String("agent", tr.t.AgentID),
				slog.String("tool", c.name), slog.String("error", cause.Error()))
		}
	}
	if ctx.Err() != nil {
		return "", context.Cause(ctx)
	}
	var out []byte
	if terr == nil {
		if out, err = marshal(result); err != nil {
			terr = errors.New("the tool's result could not be encoded")
		}
	}
	if terr != nil {
		out, _ = marshal(map[string]string{"error": cmp.Or(toModel, terr.Error())})
		if err := tc.Fail(terr.Error()); err != nil {
			return "", err
		}
		return string(out), nil
	}
	if err := tc.Result(json.RawMessage(out)); err != nil {
		return "", err
	}
	return string(out), nil
}

// marshal encodes v as compact JSON without HTML escaping.
func marshal(v any) ([]byte, error) {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return []byte(strings.TrimSuffix(b.String(), "\n")), nil
}

// logUsage logs one model call: usage when the endpoint reported it, the
// failure otherwise. Nothing of the prompt, the answer or the key.
func (tr *turn) logUsage(ctx context.Context, round, attempt int, res *response, d time.Duration, err error) {
	tr.calls++
	attrs := []slog.Attr{
		slog.String("account", tr.t.AccountName),
		slog.String("agent", tr.t.AgentID),
		slog.String("model", tr.a.model),
		slog.Int("round", round+1),
		slog.Int("attempt", attempt),
		slog.Duration("duration", d),
	}
	if res != nil {
		if res.finish != "" {
			attrs = append(attrs, slog.String("finish_reason", res.finish))
		}
		if u := res.usage; u != nil {
			tr.promptTok += u.PromptTokens
			tr.completeTok += u.CompletionTokens
			attrs = append(attrs,
				slog.Int64("prompt_tokens", u.PromptTokens),
				slog.Int64("completion_tokens", u.CompletionTokens),
				slog.Int64("total_tokens", u.TotalTokens))
			if r := u.CompletionTokensDetails.ReasoningTokens; r > 0 {
				attrs = append(attrs, slog.Int64("reasoning_tokens", r))
			}
		}
	}
	if err != nil {
		if _, ok := errors.AsType[*errEmit](err); ok || ctx.Err() != nil {
			return // the turn is over; not a model failure
		}
		attrs = append(attrs, slog.String("error", describe(err, tr.a.cfg.apiKey)))
		tr.a.cfg.logger.LogAttrs(ctx, slog.LevelWarn, "llmagent: model request failed", attrs...)
		return
	}
	tr.a.cfg.logger.LogAttrs(ctx, slog.LevelInfo, "llmagent: model usage", attrs...)
}

// withoutURL returns err with the URL of a transport failure (a
// *url.Error, "Post \"https://...\": dial tcp ...") cut to its scheme, host
// and path: a model endpoint may carry its key in the query (api-key=...),
// and logs and traces must not. The underlying error stays wrapped.
func withoutURL(err error) error {
	ue, ok := errors.AsType[*url.Error](err)
	if !ok {
		return err
	}
	where := "the model endpoint"
	if u, perr := url.Parse(ue.URL); perr == nil {
		where = (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}).String()
	}
	return &url.Error{Op: ue.Op, URL: where, Err: ue.Err}
}

// describe summarizes a model failure for the log: the status and the
// error code and type of the body, never the request (its URL or headers).
func describe(err error, key string) string {
	err = withoutURL(err)
	if apiErr, ok := errors.AsType[*openai.Error](err); ok {
		s := apiErr.Error()
		// Cut as an error event's are: the body is the endpoint's, and may
		// echo what the request held, the key included.
		if apiErr.Type != "" {
			s += " type=" + short(apiErr.Type, key)
		}
		if apiErr.Code != "" {
			s += " code=" + short(apiErr.Code, key)
		}
		return s
	}
	return err.Error()
}

// complete reports whether args is a whole JSON object.
func complete(args string) bool {
	args = strings.TrimSpace(args)
	return strings.HasPrefix(args, "{") && strings.HasSuffix(args, "}") && json.Valid([]byte(args))
}

// startsObject reports whether a chunk's arguments open a JSON object.
func startsObject(args string) bool {
	return strings.HasPrefix(strings.TrimSpace(args), "{")
}

// activityBody reports every read of a response body that got bytes.
type activityBody struct {
	io.ReadCloser
	heard func()
}

func (b *activityBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.heard()
	}
	return n, err
}
