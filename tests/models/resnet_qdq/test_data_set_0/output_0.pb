
BlogitsJ([ÖŽ>‰AV¿­p…¿·úÊ?,vC¾ÐQ¿ˆšÿ>‰AV¿,vC¿·úÊ¾