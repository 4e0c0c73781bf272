package sqlite_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/embedkit/embedkit/store"
	"github.com/embedkit/embedkit/store/gormstore/sqlite"
)

// A store on a SQLite file: the file is created and migrated on the first
// Open, and opened as it is on the next.
func ExampleOpen() {
	dir, err := os.MkdirTemp("", "embedkit-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "embed.db")
	ctx := context.Background()

	st, err := sqlite.Open(path)
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := st.SaveAccount(ctx, store.Account{Name: "acme", Plan: store.PlanEnterprise}); err != nil {
		fmt.Println(err)
		return
	}
	st.Close()

	st, err = sqlite.Open(path) // the same database again
	if err != nil {
		fmt.Println(err)
		return
	}
	defer st.Close()
	acct, err := st.AccountByName(ctx, "acme")
	fmt.Println(acct.Name, acct.Plan, err)
	// Output: acme enterprise <nil>
}
