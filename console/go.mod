module github.com/postbus/bus/console

go 1.26.0

require github.com/postbus/bus v0.3.0
