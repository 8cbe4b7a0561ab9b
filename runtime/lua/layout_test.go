package lua

import "testing"

func TestLayoutFound(t *testing.T) {
	if layoutErr != nil {
		t.Fatal(layoutErr)
	}
}
