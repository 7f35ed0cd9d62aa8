module github.com/lily-mq/lily/inbox/mongoinbox

go 1.26

require (
	github.com/lily-mq/lily v0.0.0
	go.mongodb.org/mongo-driver/v2 v2.10.0
)

require (
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/rabbitmq/amqp091-go v1.17.0 // indirect
	github.com/xdg-go/scram v1.4.0 // indirect
	github.com/xdg-go/stringprep v1.0.4 // indirect
	github.com/youmark/pkcs8 v0.0.0-20240726163527-a2c0da244d78 // indirect
	golang.org/x/crypto v0.54.0 // indirect
	golang.org/x/sync v0.22.0 // indirect
	golang.org/x/text v0.41.0 // indirect
)

// The adapter lives in the Lily repository and follows its runtime.
replace github.com/lily-mq/lily => ../..
