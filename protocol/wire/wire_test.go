package wire

import "testing"

// The examples of statestore-protocol.md §1.
func TestNotifyTopic(t *testing.T) {
	for _, tc := range []struct{ client, key, want string }{
		{"client-id1", "SOMEKEY", "clients/statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/636C69656E742D696431/command/notify/534F4D454B4559"},
		{"myclient", "lock1", "clients/statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/6D79636C69656E74/command/notify/6C6F636B31"},
		{"c", "\x00\xff\r\n", "clients/statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/63/command/notify/00FF0D0A"},
	} {
		got := NotifyTopic(tc.client, []byte(tc.key))
		if got != tc.want {
			t.Errorf("NotifyTopic(%q, %q) = %q, want %q", tc.client, tc.key, got, tc.want)
		}
		key, ok := ParseNotifyTopic(tc.client, got)
		if !ok || string(key) != tc.key {
			t.Errorf("ParseNotifyTopic(%q) = %q, %v", got, key, ok)
		}
		if !ForbiddenResponseTopic(got) {
			t.Errorf("notify topic %q must be a forbidden response topic", got)
		}
	}
}

func TestParseNotifyTopicRejects(t *testing.T) {
	good := NotifyTopic("me", []byte("k"))
	for _, topic := range []string{
		NotifyTopic("other", []byte("k")),
		good[:len(good)-1] + "Z",
		good[:len(good)-2],
		"clients/statestore/v1/" + ServiceGUID + "/6D65/command/notify/6",
	} {
		if key, ok := ParseNotifyTopic("me", topic); ok {
			t.Errorf("ParseNotifyTopic(%q) accepted key %q", topic, key)
		}
	}
	if key, ok := ParseNotifyTopic("me", "clients/statestore/v1/"+ServiceGUID+"/6D65/command/notify/6b"); !ok || string(key) != "k" {
		t.Errorf("lower-case hex key not accepted: %q %v", key, ok)
	}
}

func TestResponseTopics(t *testing.T) {
	got := ResponseTopic("myclient")
	want := "clients/6D79636C69656E74/statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/command/invoke/response"
	if got != want {
		t.Fatalf("ResponseTopic = %q, want %q", got, want)
	}
	if ForbiddenResponseTopic(got) {
		t.Fatalf("the client's own response topic is forbidden")
	}
	for _, topic := range []string{RequestTopic, "clients/statestore/v1/" + ServiceGUID, "clients/statestore/v1/" + ServiceGUID + "/x"} {
		if !ForbiddenResponseTopic(topic) {
			t.Errorf("%q must be forbidden", topic)
		}
	}
}
