package sqlite_test

import (
	"path/filepath"
	"testing"

	"gorm.io/gorm"

	"github.com/embedkit/embedkit/store/gormstore/sqlite"
)

// TestDialectorSettings: a file database's connections write ahead (WAL),
// sync each commit to disk (synchronous=FULL: an acknowledged
// write survives a power cut), and enforces foreign keys.
func TestDialectorSettings(t *testing.T) {
	db, err := gorm.Open(sqlite.Dialector(filepath.Join(t.TempDir(), "s.db")), &gorm.Config{})
	if err != nil {
		t.Fatal(err)
	}
	sqlDB, _ := db.DB()
	defer sqlDB.Close()
	var journal string
	var sync, fk int
	if err := db.Raw("PRAGMA journal_mode").Scan(&journal).Error; err != nil || journal != "wal" {
		t.Errorf("journal_mode %q (%v), want wal", journal, err)
	}
	if err := db.Raw("PRAGMA synchronous").Scan(&sync).Error; err != nil || sync != 2 {
		t.Errorf("synchronous %d (%v), want 2 (FULL)", sync, err)
	}
	if err := db.Raw("PRAGMA foreign_keys").Scan(&fk).Error; err != nil || fk != 1 {
		t.Errorf("foreign_keys %d (%v), want 1", fk, err)
	}
}
