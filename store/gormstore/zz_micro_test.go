package gormstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/embedkit/embedkit/store"
	"github.com/embedkit/embedkit/store/gormstore/sqlite"
)

func BenchmarkZZMicro(b *testing.B) {
	st, err := sqlite.Open(b.TempDir() + "/m.db")
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, _ := st.SaveAccount(ctx, store.Account{Name: "bench", Plan: store.PlanEnterprise})
	_ = st.SaveDeployment(ctx, store.Deployment{AccountID: a.ID, ID: 1, Name: "production"})
	s := store.TenantWide(a.ID)
	_ = st.UpsertDefinitions(ctx, s, []store.GroupDef{{Name: "sales"}, {Name: "marketing"}, {Name: "ops"}}, []store.AttributeDef{
		{Name: "country", Type: store.TypeString}, {Name: "region_ids", Type: store.TypeNumberArray}, {Name: "team", Type: store.TypeString}})
	look := store.Lookup{Scope: s, AttrNames: []string{"country", "region_ids", "team"}, GroupNames: []string{"sales", "marketing"}}
	found, _ := st.Lookup(ctx, look)
	up := func(i int) store.UserUpsert {
		vals := []store.AttributeValue{}
		for _, at := range found.Attributes {
			vals = append(vals, store.AttributeValue{AttributeID: at.ID, Value: json.RawMessage(`"x"`)})
		}
		return store.UserUpsert{UserKey: store.UserKey{AccountID: a.ID, ExternalID: fmt.Sprint("u", i%100)}, Persistent: true,
			Attributes: vals, SetGroups: true, GroupScope: s, Groups: []int64{found.Groups[0].ID}, Now: time.Now()}
	}
	for i := range 100 {
		st.UpsertUser(ctx, up(i))
	}
	u, _ := st.UserByKey(ctx, store.UserKey{AccountID: a.ID, ExternalID: "u1"}, time.Now())
	b.Run("empty-tx", func(b *testing.B) {
		for b.Loop() {
			st.InTx(ctx, func(tx store.Tx) error { return nil })
		}
	})
	b.Run("lookup-in-tx", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			st.InTx(ctx, func(tx store.Tx) error { tx.Lookup(ctx, look); return nil })
		}
	})
	b.Run("upsert-in-tx", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			i++
			st.InTx(ctx, func(tx store.Tx) error { tx.UpsertUser(ctx, up(i)); return nil })
		}
	})
	b.Run("session-in-tx", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			i++
			st.InTx(ctx, func(tx store.Tx) error {
				return tx.CreateSession(ctx, []byte(fmt.Sprintf("%032d", i)), store.Session{AccountID: a.ID, UserID: u.ID, DeploymentID: 1, CreatedAt: time.Now(), ExpiresAt: time.Now().Add(time.Hour)})
			})
		}
	})
	b.Run("all-own-tx", func(b *testing.B) {
		b.ReportAllocs()
		i := 1 << 20
		for b.Loop() {
			i++
			st.InTx(ctx, func(tx store.Tx) error {
				tx.Lookup(ctx, look)
				tx.UpsertUser(ctx, up(i))
				return tx.CreateSession(ctx, []byte(fmt.Sprintf("%032d", i)), store.Session{AccountID: a.ID, UserID: u.ID, DeploymentID: 1, CreatedAt: time.Now(), ExpiresAt: time.Now().Add(time.Hour)})
			})
		}
	})
}
