module github.com/lily-mq/lily

go 1.26.8

require (
	github.com/dave/jennifer v1.7.1
	github.com/google/go-cmp v0.7.0
	github.com/rabbitmq/amqp091-go v1.17.0
	gopkg.in/yaml.v3 v3.0.1
)
