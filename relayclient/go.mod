module github.com/hookrelay/relay/relayclient

go 1.22
