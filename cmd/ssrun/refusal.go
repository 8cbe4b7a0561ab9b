package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/ssrun/ssrun/protocol"
)

// Exit statuses of `ssrun kv` besides 0 (done), 1 (not found, not
// applied) and 2 (usage): see kvCmd's help.
const (
	exitFailed       = 3 // the broker could not be reached, or a request failed
	exitUnauthorized = 4 // the broker refused the login, or the ACL a key
)

// principal names who connected: the user name and client id.
func principal(r *protocol.RefusedError) string {
	if r.Username == "" {
		return fmt.Sprintf("client id %q (no user name)", r.ClientID)
	}
	return fmt.Sprintf("user %q, client id %q", r.Username, r.ClientID)
}

// refusalHint says what to change for a login the broker refused with r.
// dev is set for the rules host of `ssrun dev`, whose user and client id
// ssrun chose itself.
func refusalHint(r *protocol.RefusedError, dev bool) string {
	switch {
	case dev && r.Code == 0x87:
		return fmt.Sprintf("the ACL (--acl) grants user %q no Connect: give it a rule, e.g. principals: {usernames: [%s]} with brokerResources: [{method: Connect}] and the keys its rules use (docs/acl.example.yaml has one)", devUser, devUser)
	case dev && r.Code == 0x85:
		return fmt.Sprintf("the ACL's users: section does not let user %q use client id %q: bind it with %s: {clientIds: [\"%s-*\"]} (docs/acl.example.yaml does)", devUser, r.ClientID, devUser, devUser)
	case r.Code == 0x86:
		return "check --username and --password-file (AIO_MQTT_USERNAME, AIO_MQTT_PASSWORD_FILE); for `ssrun broker --passwords FILE`, `ssrun passwd USER` makes the line of FILE"
	case r.Code == 0x85:
		return "this client id is not available to this user: another user's session holds it, or the broker's ACL (users: section) binds it to other users; pass another with --client-id ID"
	case r.Code == 0x87:
		return "the broker's ACL grants this user or client id no Connect"
	case r.Code == 0x8A:
		return "the broker has banned this client"
	case r.Code == 0x8C:
		return "the broker does not accept this authentication method (a K8S-SAT token, --sat-file)"
	}
	return "the broker may accept a later attempt"
}

// refusedMessage is the one line that reports r: who was refused, why, and
// what to do.
func refusedMessage(r *protocol.RefusedError, dev bool) string {
	return fmt.Sprintf("%s: %v: %s", principal(r), r, refusalHint(r, dev))
}

// awaitStart waits for client's first connection. When the broker refuses
// it for a reason retrying cannot fix, it logs who was refused, why and
// what to do, once, and waits on: the client keeps trying with backoff
// (rotated credentials, a reloaded ACL let it in), and /readyz says why it
// is not ready meanwhile. It returns ctx's error if ctx ends first.
func (a *app) awaitStart(ctx context.Context, client *protocol.Client, what string, dev bool) error {
	err := client.AwaitConnectionOrRefusal(ctx)
	var r *protocol.RefusedError
	if !errors.As(err, &r) {
		return err
	}
	a.log.Error(what+" refused by the broker; retrying with backoff", "refused", refusedMessage(r, dev))
	return client.AwaitConnection(ctx)
}
