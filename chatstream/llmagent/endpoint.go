package llmagent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"
)

// What the agent reads of the model endpoint is bounded, whatever the
// endpoint sends: a turn's memory must not depend on it (an error body of
// 256 MiB, an event that never ends, a gzip bomb; Go's transport inflates
// a compressed body before these limits count it).
const (
	// maxResponseBytes bounds one streamed answer.
	maxResponseBytes = 16 << 20
	// maxErrorBodyBytes bounds the body of an error answer.
	maxErrorBodyBytes = 64 << 10
)

var errResponseTooLarge = fmt.Errorf("llmagent: the model endpoint's answer is larger than %d MiB", maxResponseBytes>>20)

// boundResponses is the agent's middleware on the SDK's requests. It caps
// every response body, and gives an error answer whose body is not an
// OpenAI error object one that says only its status, so that the SDK
// reports the status (the retry and the log depend on it) and no text of
// the endpoint's own (a proxy may echo the key) reaches the log.
func boundResponses(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
	resp, err := next(req)
	if err != nil || resp == nil {
		return resp, err
	}
	if resp.StatusCode < 400 {
		resp.Body = &boundedBody{ReadCloser: resp.Body, left: maxResponseBytes}
		return resp, nil
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBodyBytes))
	_ = resp.Body.Close()
	var v struct{ Error json.RawMessage }
	if json.Unmarshal(b, &v) != nil || !bytes.HasPrefix(bytes.TrimSpace(v.Error), []byte("{")) {
		b, _ = json.Marshal(map[string]map[string]string{"error": {"message": http.StatusText(resp.StatusCode)}})
	}
	resp.Body = io.NopCloser(bytes.NewReader(b))
	resp.ContentLength = int64(len(b))
	resp.Header.Del("Content-Encoding")
	return resp, nil
}

// boundedBody fails a read past its bytes.
type boundedBody struct {
	io.ReadCloser
	left int
}

func (b *boundedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, errResponseTooLarge
	}
	if len(p) > b.left {
		p = p[:b.left]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= n
	return n, err
}

// streamEventError replaces the error of an error event in the stream,
// whose message is the endpoint's own text (any size, maybe echoing the
// key), by one naming only its type and code.
func streamEventError(err error, key string) error {
	se, ok := errors.AsType[*ssestream.StreamError](err)
	if !ok {
		return err
	}
	var v struct {
		Error struct {
			Type string          `json:"type"`
			Code json.RawMessage `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(se.Event.Data, &v)
	return fmt.Errorf("llmagent: the model endpoint sent an error event (type %q, code %s)", short(v.Error.Type, key), short(string(v.Error.Code), key))
}

// short cuts s, a field the endpoint wrote, for a log line, with the
// endpoint's key (which a misbehaving endpoint may echo) masked.
func short(s, key string) string {
	if key != "" {
		s = strings.ReplaceAll(s, key, "xxxxx")
	}
	if len(s) > 64 {
		return s[:64] + "…"
	}
	if s == "" {
		return `""`
	}
	return s
}
