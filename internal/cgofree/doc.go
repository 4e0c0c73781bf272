// Package cgofree holds two host programs that .ci/run builds with
// CGO_ENABLED=0, to keep the promise that a host on PostgreSQL or memstore
// needs no cgo: pghost serves both APIs from gormstore on PostgreSQL (with
// pgcluster), memhost from memstore. Neither is meant to be run.
package cgofree
