package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/embedkit/embedkit/store"
)

// Bench runs the store benchmarks against a store returned by open (called
// once per sub-benchmark). The parallel cases use b.RunParallel, so
// -cpu and b.SetParallelism set the number of concurrent clients; Bench
// sets 16 goroutines per GOMAXPROCS, which is 32 on two cores. The
// provisioning cases also report the p50 and p99 latency of a transaction.
//
//   - Provision: one generate-session transaction (Lookup of the deployment,
//     3 attributes and 2 groups; UpsertUser of a known user with a profile,
//     the values and the memberships; CreateSession), over a pool of 1,000
//     existing users.
//   - ProvisionNewUser: the same, creating a new user every time.
//   - ExchangeSession: exchange a fresh session id for a token.
//   - SessionByToken: the read of every embed request.
//   - ListGroupsPages: the first and the last page of 100 among 100,000
//     groups; with keyset pagination both cost the same.
func Bench(b *testing.B, open func(b *testing.B) store.Store) {
	b.Run("Provision", func(b *testing.B) { benchProvision(b, open(b), false) })
	b.Run("ProvisionNewUser", func(b *testing.B) { benchProvision(b, open(b), true) })
	b.Run("ExchangeSession", func(b *testing.B) { benchExchange(b, open(b)) })
	b.Run("SessionByToken", func(b *testing.B) { benchSessionByToken(b, open(b)) })
	b.Run("ListGroupsPages", func(b *testing.B) { benchListPages(b, open(b)) })
}

func benchSetup(b *testing.B, st store.Store) (store.Account, store.Scope) {
	b.Helper()
	ctx := b.Context()
	a, err := st.SaveAccount(ctx, store.Account{Name: "bench", Plan: store.PlanEnterprise})
	if err != nil {
		b.Fatal(err)
	}
	if err := st.SaveDeployment(ctx, store.Deployment{AccountID: a.ID, ID: 1, Name: "production"}); err != nil {
		b.Fatal(err)
	}
	s := store.TenantWide(a.ID)
	if err := st.UpsertDefinitions(ctx, s, []store.GroupDef{{Name: "sales"}, {Name: "marketing"}, {Name: "ops"}}, []store.AttributeDef{
		{Name: "country", Type: store.TypeString}, {Name: "region_ids", Type: store.TypeNumberArray}, {Name: "team", Type: store.TypeString},
	}); err != nil {
		b.Fatal(err)
	}
	return a, s
}

var benchSeq atomic.Int64

// benchUsers is the size of the pool of returning users of Provision.
const benchUsers = 1000

func benchProvision(b *testing.B, st store.Store, fresh bool) {
	a, s := benchSetup(b, st)
	ctx := b.Context()
	attrNames := []string{"country", "region_ids", "team"}
	groupNames := []string{"sales", "marketing"}
	values := map[string]json.RawMessage{"country": json.RawMessage(`"DE"`), "region_ids": json.RawMessage(`[1,2,3]`), "team": json.RawMessage(`"red"`)}
	if !fresh {
		// The known users exist before the clock starts: the case measures
		// the steady state of a pool of returning users.
		for i := 0; i < benchUsers; i += 100 {
			err := st.InTx(ctx, func(tx store.Tx) error {
				for j := i; j < i+100; j++ {
					ext := fmt.Sprint("user-", j)
					if _, err := tx.UpsertUser(ctx, store.UserUpsert{UserKey: store.UserKey{AccountID: a.ID, ExternalID: ext}, Persistent: true, Now: time.Now()}); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	var lat latencies
	b.ReportAllocs()
	b.SetParallelism(16)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		var mine []time.Duration
		defer func() { lat.add(mine) }()
		for pb.Next() {
			start := time.Now()
			n := benchSeq.Add(1)
			ext := fmt.Sprint("user-", n%benchUsers)
			if fresh {
				ext = fmt.Sprint("new-user-", n)
			}
			now := time.Now()
			err := st.InTx(ctx, func(tx store.Tx) error {
				// As a generate-session: resolve what the request names,
				// then write the user with its values and groups.
				found, err := tx.Lookup(ctx, store.Lookup{Scope: s, DeploymentID: 1, AttrNames: attrNames, GroupNames: groupNames})
				if err != nil {
					return err
				}
				if !found.DeploymentFound {
					return errors.New("storetest: the bench deployment is missing")
				}
				vals := make([]store.AttributeValue, len(found.Attributes))
				for i, at := range found.Attributes {
					vals[i] = store.AttributeValue{AttributeID: at.ID, Value: values[at.Name]}
				}
				ids := make([]int64, len(found.Groups))
				for i, g := range found.Groups {
					ids[i] = g.ID
				}
				u, err := tx.UpsertUser(ctx, store.UserUpsert{
					UserKey: store.UserKey{AccountID: a.ID, ExternalID: ext},
					Email:   ptr(ext + "@x.test"), DisplayName: ptr("User " + ext), Picture: ptr("https://x.test/p.png"),
					Attributes: vals, SetGroups: true, GroupScope: s, Groups: ids,
					Persistent: true, MaxUsers: 1 << 30, Now: now,
				})
				if err != nil {
					return err
				}
				return tx.CreateSession(ctx, fmt.Appendf(nil, "bench-session-%d", n), store.Session{
					AccountID: a.ID, UserID: u.ID, DeploymentID: 1, CreatedAt: now, ExpiresAt: now.Add(5 * time.Minute),
				})
			})
			if err != nil {
				b.Error(err)
				return
			}
			mine = append(mine, time.Since(start))
		}
	})
	lat.report(b)
}

// latencies collects the durations of the operations of a parallel
// benchmark and reports their p50 and p99.
type latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

func (l *latencies) add(d []time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d...)
	l.mu.Unlock()
}

func (l *latencies) report(b *testing.B) {
	if len(l.d) == 0 {
		return
	}
	slices.Sort(l.d)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(l.d[len(l.d)/2]), "p50-ms")
	b.ReportMetric(ms(l.d[len(l.d)*99/100]), "p99-ms")
}

func benchExchange(b *testing.B, st store.Store) {
	a, _ := benchSetup(b, st)
	ctx := b.Context()
	now := time.Now()
	u, err := st.UpsertUser(ctx, store.UserUpsert{UserKey: store.UserKey{AccountID: a.ID, ExternalID: "u"}, Persistent: true, Now: now})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetParallelism(16)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			n := benchSeq.Add(1)
			sh := fmt.Appendf(nil, "bench-s-%d", n)
			if err := st.CreateSession(ctx, sh, store.Session{AccountID: a.ID, UserID: u.ID, DeploymentID: 1, CreatedAt: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
				b.Error(err)
				return
			}
			if _, err := st.ExchangeSession(ctx, sh, fmt.Appendf(nil, "bench-t-%d", n), now.Add(24*time.Hour), now); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func benchSessionByToken(b *testing.B, st store.Store) {
	a, _ := benchSetup(b, st)
	ctx := b.Context()
	now := time.Now()
	u, err := st.UpsertUser(ctx, store.UserUpsert{UserKey: store.UserKey{AccountID: a.ID, ExternalID: "u"}, Persistent: true, Now: now})
	if err != nil {
		b.Fatal(err)
	}
	if err := st.CreateSession(ctx, []byte("s"), store.Session{AccountID: a.ID, UserID: u.ID, DeploymentID: 1, CreatedAt: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
		b.Fatal(err)
	}
	if _, err := st.ExchangeSession(ctx, []byte("s"), []byte("t"), now.Add(24*time.Hour), now); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetParallelism(16)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := st.SessionByToken(ctx, []byte("t"), now); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func benchListPages(b *testing.B, st store.Store) {
	a, _ := benchSetup(b, st)
	ctx := b.Context()
	s := store.TenantWide(a.ID)
	const total = 100000
	for i := 0; i < total; i += 5000 {
		err := st.InTx(ctx, func(tx store.Tx) error {
			for j := i; j < i+5000; j += 500 {
				defs := make([]store.GroupDef, 500)
				for k := range defs {
					defs[k] = store.GroupDef{Name: fmt.Sprintf("g-%06d", j+k)}
				}
				if err := tx.UpsertDefinitions(ctx, s, defs, nil); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	// last is the afterID of the last full page of 100.
	var tail []int64
	for after := int64(0); ; {
		page, err := st.ListGroups(ctx, s, after, 1000)
		if err != nil {
			b.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		for _, g := range page {
			tail = append(tail, g.ID)
		}
		tail = tail[max(0, len(tail)-101):]
		after = page[len(page)-1].ID
	}
	last := tail[0]
	for _, c := range []struct {
		name  string
		after int64
	}{{"first", 0}, {"last", last}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				page, err := st.ListGroups(ctx, s, c.after, 100)
				if err != nil || len(page) != 100 {
					b.Fatalf("page: %d, %v", len(page), err)
				}
			}
		})
	}
}
