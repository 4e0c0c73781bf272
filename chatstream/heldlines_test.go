package chatstream_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/chatstream/pgcluster"
	"github.com/embedkit/embedkit/internal/apitest"
	"github.com/embedkit/embedkit/internal/testdb"
	"github.com/embedkit/embedkit/store"
)

// heldToolAgent answers "<k>[ open][ ok]": k pieces, a tool call with its
// result, then a second tool call left open ("open") or a piece; "ok"
// lets the final write succeed. A new thread's echo sorts 2 and its mark
// is 2050: k from 2038 to 2046 puts the tool call's lines on every side of
// the sorts held back below the mark.
func heldToolAgent(failing *atomic.Bool, gate chan struct{}) chatstream.AgentFunc {
	return func(ctx context.Context, tu chatstream.Turn, e chatstream.Emitter) error {
		if gate != nil {
			if err := e.Content("first "); err != nil {
				return err
			}
			<-gate
		}
		var k int
		fmt.Sscan(tu.Input, &k)
		for range k {
			if err := e.Content("x"); err != nil {
				return err
			}
		}
		tc, err := e.ToolCall("svcSqlApi", map[string]any{"q": 1})
		if err == nil {
			err = tc.Result(map[string]any{"rows": 1})
		}
		if err != nil {
			return err
		}
		if strings.Contains(tu.Input, "open") {
			_, err = e.ToolCall("svcSqlApi", map[string]any{"q": 2})
		} else {
			err = e.Content("done")
		}
		if strings.Contains(tu.Input, "ok") {
			failing.Store(false)
		}
		return err
	}
}

func inProcess(got []chatstream.Message) []string {
	var out []string
	for _, m := range conv(got).History() {
		if m.IsInProcess {
			out = append(out, fmt.Sprintf("%s (tool call %v) at sort %d", m.ID, m.ToolCall != nil, m.Sort))
		}
	}
	return out
}

// TestFailedFinalWriteLeavesNoToolCallInProcess: whatever sorts a tool
// call's lines take near the mark, a stream whose final write failed
// never carries a tool call's start without its end.
func TestFailedFinalWriteLeavesNoToolCallInProcess(t *testing.T) {
	apitest.Run(t, false, func(t *testing.T, tg apitest.Target) {
		failing := new(atomic.Bool)
		e := newEnv(t, tg, envOpts{agent: heldToolAgent(failing, nil),
			store: func(t testing.TB, b string) store.Store { return failingAppends{testdb.Open(t, b), failing} }})
		for k := 2038; k <= 2046; k++ {
			for _, in := range []string{fmt.Sprint(k), fmt.Sprint(k, " open")} {
				failing.Store(true)
				got, _ := collectErr(t.Context(), e.client, chatstream.Request{Input: in, ChatID: "c" + strings.ReplaceAll(in, " ", "-"), SessionSettings: ext("u")})
				if ms := inProcess(got); len(ms) > 0 {
					t.Errorf("%q: left in process: %v", in, ms)
				}
				for i := 1; i < len(got); i++ {
					if got[i].Sort <= got[i-1].Sort {
						t.Fatalf("%q: line %d: sort %d after %d", in, i, got[i].Sort, got[i-1].Sort)
					}
				}
				if st := got[len(got)-1]; st.ID != chatstream.StateID || st.Sort > 2050 {
					t.Errorf("%q: the stream ends with %s at sort %d, want __state__ within the mark 2050", in, st.ID, st.Sort)
				}
			}
		}
	})
}

// TestRemoteFollowerSeesEveryLine: a follower on the other replica reads
// the lines a follower on the turn's replica reads, when lines were held
// back below the mark (every checkpoint fails), whether the final write
// fails or succeeds.
func TestRemoteFollowerSeesEveryLine(t *testing.T) {
	for _, in := range []string{"2041", "2041 ok", "2043 open", "2043 open ok"} {
		t.Run(in, func(t *testing.T) {
			dsn := testdb.OpenDSN(t, testdb.Postgres)
			failing, gate := new(atomic.Bool), make(chan struct{})
			agent := heldToolAgent(failing, gate)
			ca := openCluster(t, dsn, pgcluster.WithReplicaID("a"))
			cb := openCluster(t, dsn, pgcluster.WithReplicaID("b"))
			tg := apitest.Target{Backend: testdb.Postgres, Router: apitest.ServeMux}
			a := newEnv(t, tg, envOpts{agent: agent, opts: []chatstream.Option{chatstream.WithCluster(ca)},
				store: func(t testing.TB, b string) store.Store { return failingAppends{storeOn(dsn)(t, b), failing} }})
			b := newEnv(t, tg, envOpts{agent: agent, opts: []chatstream.Option{chatstream.WithCluster(cb)}, store: storeOn(dsn)})
			failing.Store(true)
			_, waitA := streamUntil(t, t.Context(), a.client, chatstream.Request{Input: in, ChatID: "held", SessionSettings: ext("u")}, isPiece("first "))
			_, waitB := streamUntil(t, t.Context(), b.client, chatstream.Request{ChatID: "held", SessionSettings: ext("u")}, isPiece("first "))
			close(gate)
			onA, _, errA := waitA()
			onB, _, errB := waitB()
			if errA != nil || errB != nil {
				t.Fatal(errA, errB)
			}
			if ms := inProcess(onB); len(ms) > 0 {
				t.Errorf("replica B: left in process: %v", ms)
			}
			if x, y := jsonOf(t, onA[1:]), jsonOf(t, onB[1:]); x != y {
				t.Errorf("the stream on B (%d lines) differs from the one on A (%d lines)", len(onB), len(onA))
			}
		})
	}
}
