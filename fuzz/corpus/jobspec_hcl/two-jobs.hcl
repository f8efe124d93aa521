job "a" {}
job "b" {}
