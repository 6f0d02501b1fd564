// Package logchange keeps retry loops quiet: a loop that fails every few
// seconds logs a failure when it appears or changes, and its recovery
// once, instead of one line per attempt.
//
//	var errs logchange.Errors
//	for {
//		err := try()
//		switch errs.Note(err) {
//		case logchange.Failed:
//			log.Warn("cannot sync, retrying", "err", err)
//		case logchange.Recovered:
//			log.Info("sync recovered")
//		}
//		...
//	}
package logchange

// Change is what a new result means for the log.
type Change int

// Changes Note reports.
const (
	Same      Change = iota // as before: log nothing
	Failed                  // a new or different error: log it
	Recovered               // success after a failure: log the recovery
)

// Errors remembers a loop's last error by its text. The zero value is a
// loop that has not failed. Not safe for concurrent use.
type Errors struct {
	last    string
	failing bool
}

// Note records the result of one attempt (nil for success) and says what
// to log.
func (e *Errors) Note(err error) Change {
	if err == nil {
		if !e.failing {
			return Same
		}
		e.failing, e.last = false, ""
		return Recovered
	}
	if e.failing && err.Error() == e.last {
		return Same
	}
	e.failing, e.last = true, err.Error()
	return Failed
}
