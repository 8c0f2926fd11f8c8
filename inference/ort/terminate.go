//go:build ort

package ort

import (
	"context"
	"fmt"

	onnx "github.com/yalue/onnxruntime_go"
)

// runCtx runs session on inputs and outputs, and stops the Run when ctx ends first: ONNX Runtime's run
// termination flag, set from a watcher goroutine, makes the Run return an error within about one
// operator. A Run stopped that way returns an error wrapping ctx.Err(), so callers tell a deadline from a
// failure of the model.
func runCtx(ctx context.Context, session *onnx.DynamicAdvancedSession, inputs, outputs []onnx.Value) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if ctx.Done() == nil { // a context that never ends needs no watcher
		return session.Run(inputs, outputs)
	}
	ro, err := onnx.NewRunOptions()
	if err != nil {
		return fmt.Errorf("create run options: %w", err)
	}
	defer ro.Destroy()
	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-ctx.Done():
			_ = ro.Terminate()
		case <-stop:
		}
	}()
	err = session.RunWithOptions(inputs, outputs, ro)
	close(stop)
	<-watched // ro outlives the watcher's Terminate
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("run stopped: %w", ctx.Err())
	}
	return err
}
