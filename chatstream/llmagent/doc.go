// Package llmagent is a [chatstream.Agent] backed by a language model on
// any OpenAI-compatible Chat Completions endpoint (OpenAI, Azure-style
// proxies, Ollama, vLLM, llama.cpp server...), built on the official Go SDK
// github.com/openai/openai-go.
//
// The host gives the agent an endpoint, a model name and its [Tool]s, and
// hands the agent to [chatstream.NewHandler]:
//
//	agent := llmagent.New("http://127.0.0.1:11434/v1", "qwen3:8b",
//		[]llmagent.Tool{metaTool, sqlTool},
//		llmagent.WithAPIKey(key),
//		llmagent.WithSystemPrompt(prompt))
//	h := chatstream.NewHandler(st, agent)
//
// One turn works like this:
//
//   - The model gets the system prompt, the thread's history (its final
//     messages: user inputs, tool calls with their results, answers) and
//     the user's input. The oldest exchanges are left out when the call
//     would exceed the context budget ([WithContextBudget]).
//   - The request streams (server-sent events). Text deltas become content
//     pieces as they arrive; reasoning, when the endpoint streams it in a
//     reasoning_content or reasoning field, becomes thinking (shown in
//     development mode only).
//   - When the model calls tools, each call becomes a tool-call message
//     whose toolCall.input is the model's arguments, the tool runs, and its
//     result (or {"error": msg}) completes the message and goes back to the
//     model as a tool message: data, never instructions. At most
//     [MaxToolRounds] rounds of tool calls per turn; after that the model is
//     asked to answer without tools.
//   - Every call is capped at [WithMaxOutputTokens] output tokens. Usage
//     (prompt, completion and reasoning tokens) is logged per call and per
//     turn.
//
// Failures: a model request that fails before anything of it was streamed
// (connection error, 408, 409, 429, 5xx, an error event, a stream cut,
// ended without a finish reason, or silent for [WithIdleTimeout]) is
// retried once per turn, after [WithRetryDelay] or the endpoint's
// retry-after-ms or Retry-After (up to 10 seconds). The SDK's own retries
// are off, so that is one retry in total. A request that failed after it
// streamed text or reasoning, a second failure, or a 4xx other than 408,
// 409 and 429 ends the turn with an error, which the chat handler turns
// into state.error. Abort cancels the turn's context, which cancels the
// HTTP request at once.
//
// Safety: the agent sends data only to the base URL given to [New]; the
// endpoint and the key never come from the environment (the SDK still
// adds OPENAI_ORG_ID, OPENAI_PROJECT_ID and OPENAI_CUSTOM_HEADERS as
// headers when they are set). The tools, not the model, must enforce
// what the user may see (row filters, branches): the model's arguments are
// untrusted, and a prompt injected through data can then at most make the
// model run other queries the user could run anyway. The system prompt
// ([WithSystemPrompt]) should describe the data model and the user's
// context, never be the thing that restricts rows.
package llmagent
