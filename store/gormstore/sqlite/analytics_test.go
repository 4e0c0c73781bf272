package sqlite_test

import (
	"path/filepath"
	"testing"

	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/embedkit/embedkit/chatstream/analytics"
	"github.com/embedkit/embedkit/store/gormstore/sqlite"
)

// TestAnalyticsOnDialector: the analytics tool takes a handle opened with
// the package's Dialector, whose driver wraps go-sqlite3's connections.
func TestAnalyticsOnDialector(t *testing.T) {
	path := filepath.Join(t.TempDir(), "shop.db")
	db, err := gorm.Open(sqlite.Dialector(path), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Exec("CREATE TABLE sales (id INTEGER PRIMARY KEY, country TEXT, amount REAL)").Error; err != nil {
		t.Fatal(err)
	}
	ro, err := gorm.Open(sqlite.Dialector(path+"?mode=ro"), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range []*gorm.DB{db, ro} {
		if d, err := g.DB(); err == nil {
			t.Cleanup(func() { _ = d.Close() })
		}
	}
	sqlDB, _ := ro.DB()
	model := &analytics.Model{Views: []analytics.View{{
		Name: "sales", Title: "Sales", SQL: "SELECT country, amount FROM main.sales",
		Filters: []analytics.RowFilter{{Attribute: "country", Column: "country"}},
	}}}
	if _, err := analytics.NewSQLTool(sqlDB, model); err != nil {
		t.Errorf("NewSQLTool: %v", err)
	}
}
