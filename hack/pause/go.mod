module llmservice.local/pause

go 1.26
