package runtime

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// RunUntilSignalled runs c until SIGINT or SIGTERM. The first signal stops
// intake and lets in-flight work settle through the shutdown's phases; a
// second signal forces at once.
func (c *Consumer) RunUntilSignalled() (*Report, error) {
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(signals)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-signals:
		case <-done:
			return
		}
		stop()
		select {
		case <-signals:
			c.Force()
		case <-done:
		}
	}()
	return c.Run(ctx)
}
