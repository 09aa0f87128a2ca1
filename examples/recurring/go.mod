module github.com/postbus/bus/examples/recurring

go 1.26.0

replace github.com/postbus/bus => ../../

require (
	github.com/postbus/bus v0.0.0
	github.com/robfig/cron/v3 v3.0.1
)
