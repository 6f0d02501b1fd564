package logchange

import (
	"errors"
	"testing"
)

func TestNote(t *testing.T) {
	a, b := errors.New("a"), errors.New("b")
	steps := []struct {
		err  error
		want Change
	}{
		{nil, Same}, {a, Failed}, {a, Same}, {errors.New("a"), Same}, {b, Failed},
		{nil, Recovered}, {nil, Same}, {b, Failed}, {errors.New(""), Failed}, {errors.New(""), Same}, {nil, Recovered},
	}
	var e Errors
	for i, s := range steps {
		if got := e.Note(s.err); got != s.want {
			t.Fatalf("step %d: Note(%v) = %d, want %d", i, s.err, got, s.want)
		}
	}
}
