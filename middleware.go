package bus

import "context"

// PipelineFunc is one step of the incoming or outgoing pipeline: it handles
// or sends the envelope.
type PipelineFunc func(ctx context.Context, env *Envelope) error

// Middleware wraps a pipeline step, in the func(next) next style:
//
//	func Timing(next bus.PipelineFunc) bus.PipelineFunc {
//		return func(ctx context.Context, env *bus.Envelope) error {
//			start := time.Now()
//			err := next(ctx, env)
//			log.Printf("%s took %v", env.Type, time.Since(start))
//			return err
//		}
//	}
//
// Incoming middleware (Config.Incoming) runs for each handling attempt of a
// received message, around all handlers of its type; an error it returns is
// a handler failure and is retried. Outgoing middleware (Config.Outgoing)
// runs exactly once per message, when Send, Publish or Reply is called, and
// may change the envelope (headers, attributes) before it is sent or
// scheduled; an error aborts the send.
type Middleware func(next PipelineFunc) PipelineFunc

func chain(mws []Middleware, last PipelineFunc) PipelineFunc {
	for i := len(mws) - 1; i >= 0; i-- {
		last = mws[i](last)
	}
	return last
}
