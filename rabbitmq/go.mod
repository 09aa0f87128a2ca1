module github.com/postbus/bus/rabbitmq

go 1.26

require (
	github.com/postbus/bus v0.3.0
	github.com/rabbitmq/amqp091-go v1.16.0
	go.uber.org/goleak v1.3.0
)
