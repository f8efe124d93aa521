job "a" {
  group "g" {
    count = 1
