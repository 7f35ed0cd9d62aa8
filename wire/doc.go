// Package wire is the codec Lily's generated code reads messages with: a JSON
// reader that decodes a body member by member with no reflection and no
// intermediate tree, the FieldError every extractor fails with, strict RFC 3339
// times, and the readers of typed AMQP header values.
//
// It depends on the standard library only (and internal/membername, which
// quotes a member name for its errors and lilygen's schema checker alike), so
// that lilygen's schema checker, the generated extractors and the runtime all
// read a message by the same rules without linking a broker client.
package wire
