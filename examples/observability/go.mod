module github.com/postbus/bus/examples/observability

go 1.26.0

replace (
	github.com/postbus/bus => ../..
	github.com/postbus/bus/otel => ../../otel
	github.com/postbus/bus/sqlite => ../../sqlite
)
