package broker_test

// The password file is reloaded like the ACL file (issue 29, point 3): a
// user added can connect, a user removed cannot connect again (connections
// made before stay up), a file that does not load is reported with its line
// and the previous users stay, and the users given in Config.Users survive.

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ssrun/ssrun/broker"
	"github.com/ssrun/ssrun/broker/brokertest"
)

func TestPasswordFileReloaded(t *testing.T) {
	logs := &recordLog{}
	dir := t.TempDir()
	file := filepath.Join(dir, "passwords")
	if err := os.WriteFile(file, []byte("alice:"+cheapHash(t, "alice-pw")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	builtin := []byte(cheapHash(t, "dev-pw"))
	b := brokertest.Start(t, withRecordLog(logs), func(c *broker.Config) {
		c.PasswordFile, c.Users = file, map[string][]byte{"ssrun-dev": builtin}
	})
	a := dial(t, b, alice)
	if _, err := tryDial(t, b.Addr(), bob); err == nil {
		t.Fatal("bob connected before he is in the password file")
	}

	reloadFile(t, logs, file, "bob:"+cheapHash(t, "bob-pw")+"\n", "password file reloaded")
	dial(t, b, bob)
	if _, err := tryDial(t, b.Addr(), alice); err == nil {
		t.Fatal("alice connected again after her removal from the password file")
	}
	a.set("still", "up")                               // connected before: stays
	dial(t, b, withCredentials("ssrun-dev", "dev-pw")) // Config.Users survive a reload

	reloadFile(t, logs, file, "bob:"+cheapHash(t, "bob-pw")+"\ncarol\n", "password file not reloaded")
	if got := logs.matching("password file not reloaded"); !strings.Contains(got[0], file+":2: want username:bcrypt-hash") {
		t.Errorf("reload error does not name file:line: %q", got)
	}
	dial(t, b, bob) // the previous version stays in force
}
