package gateway

import "warren/api"

// emit tells every interested subscriber about ev (events.Bus.Emit). It
// forwards, so that the rooms not yet moved keep their call sites; it
// goes once they take their own events.
func (g *Gateway) emit(ev api.Event) { g.events.Emit(ev) }
