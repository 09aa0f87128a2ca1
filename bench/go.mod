module github.com/postbus/bus/bench

go 1.26

require github.com/postbus/bus v0.0.0

replace github.com/postbus/bus => ../
