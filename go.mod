module github.com/lily-mq/lily

go 1.26.8

require github.com/rabbitmq/amqp091-go v1.17.0
