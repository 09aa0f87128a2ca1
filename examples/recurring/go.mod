module github.com/postbus/bus/examples/recurring

go 1.26.0

require (
	github.com/postbus/bus v0.3.0
	github.com/robfig/cron/v3 v3.0.1
)
