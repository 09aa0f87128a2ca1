module github.com/postbus/bus/cmd/postbus

go 1.26.0

require (
	github.com/postbus/bus v0.0.0
	github.com/postbus/bus/console v0.0.0
)

replace (
	github.com/postbus/bus => ../../
	github.com/postbus/bus/console => ../../console
	github.com/postbus/bus/postgres => ../../postgres
	github.com/postbus/bus/sqlite => ../../sqlite
	github.com/postbus/bus/rabbitmq => ../../rabbitmq
	github.com/postbus/bus/nats => ../../nats
)
