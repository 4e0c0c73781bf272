// Package chatstream serves the AI agent chat streaming API
// (stream-chat-state and abort) over newline-delimited JSON, driving a
// host-supplied [Agent].
package chatstream
