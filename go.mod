module github.com/postbus/bus

go 1.26
