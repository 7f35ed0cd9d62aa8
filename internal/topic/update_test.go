package topic_test

// go test ./... -update hands the flag to this package's tests too.
import _ "github.com/lily-mq/lily/internal/update"
