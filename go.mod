module github.com/ssrun/ssrun

go 1.26
